"""The command line, answered before Hydra runs the job and before torch loads (but for counting
a GPU machine's GPUs): a misspelt name, an interpolation that cannot resolve, Hydra's own
refusal, then (training) a bad value, each in one ``error:`` line, exit 2, nothing written.
And the job's config as its run will see it (``with_output_dir``, ``as_hydra_sets_it``,
``check_hydra_keys``), which the checks before the run (``multigpu.run.preflight``) share.

The values are judged by the run's own check (``multigpu.config.settings.resolve_run``) on the
config the typo check composed, with the command's values set on it as Hydra sets them: where
every override is one Hydra surely takes (``Composition.cannot_refuse``), that is the config the
job will be given. A bad value is then answered from one composition, without Hydra's second
one and the job's imports; anything less plain is left to the job, which runs the same check.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from multigpu.config.computation import flatten
from multigpu.config.errors import Unresolved, UserError, closest, did_you_mean, message
from multigpu.config.job_names import task_overrides
from multigpu.config.launch import LAUNCHERS
from multigpu.config.typo_hydra import conf_dir, cwd
from multigpu.config.typos import Composition, check_interpolations, find_typos, hydra_refusal

# Under torchrun every process of a node checks the same command line: the first says the
# mistake, and torchrun stops the others when it exits; they say it too if it has not by then.
ECHO_WAIT_S = 5.0


def check_command_line(
    config_name: str, values: Callable[[Any], None] | None = None, sweeps: bool = True
) -> None:
    """Exit 2 with the one line of ``refusal``; else return, having written nothing. Without
    ``sweeps`` (eval.py, which writes nothing), ``-m`` is refused: Hydra writes a sweep's
    folder and its config there."""
    multirun = {"-m", "--multirun"} & set(sys.argv[1:])
    if cwd() is None:  # Hydra reads it first thing, with a traceback
        said = "the current folder no longer exists (deleted or moved): cd into one that does"
    elif multirun and not sweeps:
        said = (
            f"{multirun.pop()}: eval.py writes nothing, and a sweep writes Hydra's multirun "
            "folder; run eval.py once for each value"
        )
    else:
        said = refusal(sys.argv[1:], config_name, values)
    if said:
        if LAUNCHERS["torchrun"](os.environ) and os.environ.get("LOCAL_RANK", "0") != "0":
            time.sleep(ECHO_WAIT_S)  # the node's first process says the same; torchrun stops us
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
    """``values``' refusal of the config the job will be given (``job_config``), where the
    typo check's composition shows it; None where it does not, or where the values are taken."""
    cfg = job_config(argv, judged)
    if cfg is None:
        return None
    try:
        check_hydra_keys(cfg)  # as the job's check, in its order
        with as_hydra_sets_it(cfg):  # ${hydra:runtime.cwd} in a config file resolves
            values(cfg)
    except Unresolved:  # a value the job alone may resolve: the job says it
        return None
    except UserError as refused:
        return message(refused) if refused.exit_code == 2 else None
    except Exception:  # noqa: BLE001 - the job runs the same check, and says it there
        return None
    return None


def job_config(argv: list[str], judged: Composition) -> Any | None:
    """The config Hydra will give the one job of ``argv``: ``judged``'s composition of its group
    options, with its other overrides set as Hydra sets them (its output folder the current
    one, since Hydra alone knows it: ``with_output_dir``). None where that is not sure to be
    it: a flag (``-m``, ``--cfg``), a sweep, an append, a list, a map, an interpolation, a
    multirun."""
    overrides = judged.overrides
    if any(arg.startswith("-") for arg in argv) or any(o.is_sweep_override() for o in overrides):
        return None
    if not judged.cannot_refuse(overrides):
        return None
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra.types import RunMode

    # Its group options already chosen; the output folder is Hydra's alone: nothing is written.
    cfg = with_output_dir(judged.config, Path(cwd() or "."))
    settings = [o for o in overrides if not judged.is_group(o.key_or_group)]
    try:
        ConfigLoaderImpl._apply_overrides_to_config(settings, cfg)  # as Hydra sets them
    except Exception:  # noqa: BLE001 - Hydra says it, with its context, when it runs
        return None
    task = [o for o in overrides if not o.is_hydra_override()]
    with open_dict(cfg.hydra):  # Hydra's record of the command line, as it keeps it
        cfg.hydra.overrides.task = [o.input_line for o in task]
        cfg.hydra.overrides.hydra = [o.input_line for o in overrides if o.is_hydra_override()]
        named = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            task, named.exclude_keys, named.item_sep, named.kv_sep
        )
    if cfg.hydra.mode == RunMode.MULTIRUN:  # hydra.mode=MULTIRUN: each job is checked
        return None
    return cfg


def with_output_dir(config: DictConfig, folder: Path, number: int | None = None) -> DictConfig:
    """The job's config as its run will see it: ``paths.output_dir`` and Hydra's
    ``runtime.output_dir`` are the folder, which Hydra sets only once it creates it, and a
    sweep's job has its ``number`` (``hydra.job.num``), which Hydra's launcher sets then."""
    config = copy.deepcopy(config)
    with open_dict(config):
        OmegaConf.update(config, "paths.output_dir", str(folder), force_add=True)
    if "hydra" in config:
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.runtime.output_dir = os.path.abspath(folder)
            if number is not None:
                config.hydra.job.id, config.hydra.job.num = number, number
    return config


HYDRA_KEY = re.compile(r"\$\{hydra:([^}]+)\}")  # ${hydra:job.num}: a key of Hydra's config


def check_hydra_keys(job: DictConfig) -> None:
    """Every ``${hydra:key}`` in the job's values names a key Hydra's config has: Hydra's
    resolver gives null for any other, and a misspelt one (``${hydra:job.nmu}``) had trained
    with a null setting."""
    known = flatten(OmegaConf.to_container(job.hydra, resolve=False))  # a ??? value is a key
    nodes = {k.rsplit(".", n)[0] for k in known for n in range(1, k.count(".") + 1)}
    for key, value in flatten(OmegaConf.to_container(job, resolve=False)).items():
        if key.startswith(("hydra.overrides.", "hydra.job.override_dirname")):
            continue  # the command's own text, said again: the value it sets names the key
        for named in HYDRA_KEY.findall(str(value)):
            if named not in known and named not in nodes:
                meant = did_you_mean([f"hydra.{k}" for k in closest(named, known)])
                raise UserError(
                    f"{key}={value} names hydra.{named}, which Hydra's config does not have"
                    + (meant or ": name a key it has, e.g. ${hydra:job.num}")
                )


@contextlib.contextmanager
def as_hydra_sets_it(job: DictConfig) -> Iterator[None]:
    """``${hydra:...}`` in the job's config resolves, for the block, as in its run: Hydra sets
    its config for that only as the job starts."""
    from hydra.core.hydra_config import HydraConfig

    instance = HydraConfig.instance()
    before = instance.cfg
    instance.set_config(job)
    try:
        yield
    finally:
        instance.cfg = before


def training_values(cfg: Any) -> None:
    """Training's check of its values on this machine (``resolve_run``), as the job runs it."""
    from multigpu.config.settings import Machine, resolve_run

    resolve_run(cfg, dict(cfg.hydra.runtime.choices), Machine.this(multirun=False))


# What eval.py reads of ``trainer``: the rest is training's, and would be ignored.
EVALUATION_READS = ("trainer.accelerator", "trainer.devices", "trainer.precision")


def evaluation_values(cfg: Any) -> None:
    """What eval.py refuses before Hydra starts its job: a copy of its config
    (``hydra.output_subdir``), which Hydra writes as the job starts, into a folder that may be a
    run's (whose own copy it would replace), and a folder for its job (``hydra.run.dir``), which
    Hydra makes: eval.py writes nothing, its result is stdout's. And a trainer setting it does
    not read, which had been taken and ignored (``+trainer.limit_test_batches=0.25`` tested the
    whole set)."""
    subdir = cfg.hydra.get("output_subdir")
    if subdir is not None:
        raise UserError(
            f"hydra.output_subdir={subdir}: eval.py writes nothing, not even a copy of its config "
            "(its result is the JSON on stdout); drop it"
        )
    check_evaluation_overrides(cfg.hydra)


def check_evaluation_overrides(hydra: Any) -> None:
    """The command line of eval.py (``hydra``: Hydra's config, its record of it) sets no
    folder for Hydra to make and no trainer setting eval.py does not read."""
    overrides = [*task_overrides(hydra), *map(str, hydra.overrides.get("hydra") or [])]
    given = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    if "hydra.run.dir" in given and Path(str(hydra.run.dir)).resolve() != Path.cwd().resolve():
        raise UserError(
            f"hydra.run.dir={hydra.run.dir}: eval.py writes nothing, and makes no folder (its "
            "result is the JSON on stdout); drop it"
        )
    for key in (k for k in given if k.startswith("trainer.") and k not in EVALUATION_READS):
        raise UserError(
            f"{key} is not read by eval.py, which tests the whole test set on one device with "
            "trainer.accelerator, trainer.devices and trainer.precision: drop it (to test on "
            "fewer images: data.test_subset=<images>)"
        )
