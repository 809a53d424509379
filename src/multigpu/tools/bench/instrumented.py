"""A run of ``train.py`` as users start it, with one measuring callback more, whose JSON result
the tools print: ``python -m multigpu.tools.bench.host_syncs``, ``...overhead``.

The run is a real ``python train.py`` (its checks, its strategy's processes: DDP relaunches
``train.py``, not the tool), in a folder of its own; the tool adds its defaults where the
command line does not set the same key, so any of them can be overridden.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multigpu.config.errors import UserError
from multigpu.tools.arguments import DefaultsHelp, OneLineParser, output_folder
from multigpu.tools.bench.__main__ import REPO, last_line

RESULT = "result.json"


def key_of(override: str) -> str:
    """The key an override sets: ``+trainer.max_steps=3`` and ``~logger`` set ``trainer.max_steps``
    and ``logger``."""
    return override.split("=", 1)[0].lstrip("+~")


def with_defaults(overrides: list[str], defaults: list[str]) -> list[str]:
    """``defaults`` whose keys ``overrides`` leave alone, then ``overrides``."""
    given = {key_of(o) for o in overrides}
    return [d for d in defaults if key_of(d) not in given] + overrides


def callback_overrides(target: str, params: dict[str, Any], path: Path) -> list[str]:
    """The callback as a Hydra config node ``callbacks.measure``, writing its result to
    ``path``."""
    node = {"_target_": target, "path": str(path), **params}
    return [f"+callbacks.measure.{key}={json.dumps(value)}" for key, value in node.items()]


def run_measured(
    target: str,
    params: dict[str, Any],
    overrides: list[str],
    out: Path | None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``python train.py <overrides>`` with the callback ``target(**params)``, in ``out`` (a
    temporary folder when None), in ``env`` (default: this one); the callback's result. A run
    that fails raises ``RuntimeError`` with its last line (its log is ``train.out`` in
    ``out``); a run that refuses its input (exit 2), ``UserError`` with its line, leaving no
    ``out`` it made; a run folder (``out``'s ``run``, or the ``hydra.run.dir`` given) that
    exists raises ``UserError`` (a measured run stops early: it would not train again)."""
    with tempfile.TemporaryDirectory(prefix="measured-") as temporary:
        folder = Path(out or temporary)
        given = with_defaults(overrides, [f"hydra.run.dir={folder / 'run'}"])
        run = Path(next(o for o in given if key_of(o) == "hydra.run.dir").split("=", 1)[1])
        if run.exists():
            raise UserError(f"{run} holds an earlier measured run: pass another --out")
        made = folder  # the outermost folder this call creates, or None
        while not made.parent.exists():
            made = made.parent
        made = None if folder.exists() else made
        folder.mkdir(parents=True, exist_ok=True)
        result = folder / RESULT
        result.unlink(missing_ok=True)
        command = [
            sys.executable,
            str(REPO / "train.py"),
            *given,
            *callback_overrides(target, params, result),
        ]
        log = folder / "train.out"
        with log.open("w") as sink:
            done = subprocess.run(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        if done.returncode == 2:  # train.py refused what it was given, writing nothing
            said = last_line(log, done.returncode).removeprefix("error: ")
            if made is not None:
                shutil.rmtree(made)
            else:
                log.unlink()
            raise UserError(said)
        if done.returncode != 0 or not result.is_file():
            raise RuntimeError(last_line(log, done.returncode))
        return json.loads(result.read_text())


def parse_measuring_args(
    prog: str, description: str, window: Callable[[OneLineParser], Any], argv: list[str] | None
) -> Namespace:
    """A measuring tool's command line: its ``window`` of steps, then ``--out`` and train.py's
    overrides, in any order."""
    parser = OneLineParser(prog=prog, description=description, formatter_class=DefaultsHelp)
    window(parser)
    parser.add_argument("--out", type=output_folder, help="keep the run here (default: not kept)")
    parser.add_argument("overrides", nargs="*", help="train.py's, e.g. experiment=fast")
    return parser.parse_intermixed_args(argv)


def measure(target: str, params: dict[str, Any], args: Namespace) -> dict[str, Any] | int:
    """The measured run's result, or, after its one ``error:`` line, the exit status: 2 for
    what the command was given, 1 for a run that failed (its own error line as it is)."""
    try:
        return run_measured(target, params, args.overrides, args.out)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        said = str(err)
        print(said if said.startswith("error: ") else f"error: the run failed: {said}",
              file=sys.stderr)  # fmt: skip
        return 1
