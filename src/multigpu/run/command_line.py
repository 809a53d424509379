"""The command line, answered before Hydra runs the job and before torch loads: a misspelt name,
an interpolation that cannot resolve, Hydra's own refusal, then (training) a bad value, each in
one ``error:`` line, exit 2, nothing written.

The values are judged by the run's own check (``multigpu.config.settings.resolve_run``) on the
config the typo check composed, with the command's values set on it as Hydra sets them: where
every override is one Hydra surely takes (``Composition.cannot_refuse``), that is the config the
job will be given. A bad value is then answered from one composition, without Hydra's second
one and the job's imports; anything less plain is left to the job, which runs the same check.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from typing import Any

from multigpu.config.errors import UserError, message
from multigpu.config.typo_hydra import conf_dir
from multigpu.config.typos import Composition, check_interpolations, find_typos, hydra_refusal

OUTPUT_DIR = "paths.output_dir"  # ${hydra:runtime.output_dir}: known once Hydra runs the job


def check_command_line(config_name: str, values: Callable[[Any], None] | None = None) -> None:
    """Exit 2 with the one line of ``refusal``; else return, having written nothing."""
    if said := refusal(sys.argv[1:], config_name, values):
        print(f"error: {said}", file=sys.stderr, flush=True)
        sys.exit(2)


def refusal(
    argv: list[str], config_name: str, values: Callable[[Any], None] | None = None
) -> str | None:
    """What is wrong with ``argv`` for the config ``config_name``, in one line, or None.
    ``values`` checks the composed config's values (raising ``UserError``)."""
    conf, judged = conf_dir(), []
    typos = "; ".join(typo.message for typo in find_typos(argv, config_name, conf, judged))
    said = typos or check_interpolations(argv, config_name, conf)
    said = said or hydra_refusal(argv, config_name, conf, *judged)
    if said or values is None or not judged:
        return said
    return value_refusal(argv, judged[0], values)


def value_refusal(
    argv: list[str], judged: Composition, values: Callable[[Any], None]
) -> str | None:
    """``values``' refusal of the config the job will be given, where the typo check's
    composition shows it exactly; None where it does not (a flag: ``-m``, ``--cfg``; a sweep;
    an append, a list, a map, an interpolation), or where the values are taken."""
    overrides = judged.overrides
    if any(arg.startswith("-") for arg in argv) or any(o.is_sweep_override() for o in overrides):
        return None
    if not judged.cannot_refuse(overrides):
        return None
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    cfg = copy.deepcopy(judged.config)  # its group options already chosen
    settings = [o for o in overrides if not judged.is_group(o.key_or_group)]
    try:
        ConfigLoaderImpl._apply_overrides_to_config(settings, cfg)  # as Hydra sets them
    except Exception:  # noqa: BLE001 - Hydra says it, with its context, when it runs
        return None
    if cfg.hydra.mode == RunMode.MULTIRUN:  # hydra.mode=MULTIRUN: each job is checked
        return None
    if OmegaConf.select(cfg, OUTPUT_DIR, throw_on_resolution_failure=False) is None:
        with open_dict(cfg):
            OmegaConf.update(cfg, OUTPUT_DIR, os.getcwd())  # nothing is written there
    try:
        values(cfg)
    except UserError as refused:
        return message(refused)
    except Exception:  # noqa: BLE001 - the job runs the same check, and says it there
        return None
    return None


def training_values(cfg: Any) -> None:
    """Training's check of its values on this machine (``resolve_run``), as the job runs it."""
    from multigpu.config.settings import Machine, resolve_run

    resolve_run(cfg, dict(cfg.hydra.runtime.choices), Machine.this(multirun=False))
