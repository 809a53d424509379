"""The types of the tools' command-line arguments (``python -m multigpu.tools.bench``,
``...predict``, ``...report``): checked where they come in, a mistake answered as the entry points
answer a config's, in one ``error:`` line naming the argument, exit status 2."""

from __future__ import annotations

import argparse
import math
import os
import typing
from collections.abc import Callable
from pathlib import Path

from multigpu.config.errors import WriteFailed, closest, did_you_mean
from multigpu.storage.atomic import check_creatable
from multigpu.storage.paths import canonical


class OneLineParser(argparse.ArgumentParser):
    """argparse, answering a mistake as the entry points answer a config's: one ``error:`` line
    naming the argument, exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        text = " ".join(message.split())
        if text.startswith("unrecognized arguments: "):
            text += self.suggestion(text.removeprefix("unrecognized arguments: ").split())
        self.exit(2, f"error: {text}\n")

    def suggestion(self, unknown: list[str]) -> str:
        """``: did you mean --x?`` for a misspelt option (as train.py answers a misspelt key)."""
        options = [o for action in self._actions for o in action.option_strings]
        for word in unknown:
            if word.startswith("-") and (close := closest(word.split("=")[0], options)):
                return did_you_mean(close)
        return ""


class DefaultsHelp(argparse.RawDescriptionHelpFormatter):
    """The module's docstring as written, and every option's default after its help (an
    option whose default is nothing says in its help what leaving it out does)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def number(least: float, most: float, integer: bool = False) -> Callable[[str], float | int]:
    """An argparse ``type``: a finite number (an integer if ``integer``) from ``least`` to
    ``most``."""
    ends = (f"{int(least)} to {int(most)}") if integer else f"{least:g} to {most:g}"
    wanted = f"{'an integer' if integer else 'a number'} from {ends}"

    def parse(text: str) -> float | int:
        try:
            value: float | int = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not (math.isfinite(value) and least <= value <= most):
            raise argparse.ArgumentTypeError(f"{text} is not {wanted}")
        return value

    parse.__name__ = "integer" if integer else "number"
    return parse


def path_name(text: str) -> str:
    """An argparse ``type``: a path as given, not empty and without NUL."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path")
    return text


def existing_folder(text: str) -> Path:
    """An argparse ``type``: a folder that exists (to read from)."""
    path = Path(path_name(text)).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path


def output_folder(text: str) -> Path:
    """An argparse ``type``: a folder to write into, created if missing: nothing on its way
    may be a file, and the nearest existing folder must take new files."""
    path = Path(path_name(text)).expanduser()
    refuse_files_on_the_way(path)
    writable(path)
    return path


def output_file(suffix: str) -> Callable[[str], Path]:
    """An argparse ``type``: a ``suffix`` file to write (its folder is created if missing); the
    suffix keeps a slip of the keyboard from overwriting some other file, and a run's or a
    sweep's folder is its own (its report's figures among them)."""

    def parse(text: str) -> Path:
        path = Path(path_name(text)).expanduser()
        if path.suffix.lower() != suffix:
            raise argparse.ArgumentTypeError(f"{text} is not a {suffix} file name")
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a folder: pass a file name")
        if (held := owned_folder_around(path.parent)) is not None:
            outer = held[0]  # a job's folder lies in its sweep's: beside the outermost
            while outer.parent != outer and (above := owned_folder_around(outer.parent)):
                outer = above[0]
            raise argparse.ArgumentTypeError(
                f"{text}: {held[1]}, which only it writes in; pass a file outside it, e.g. "
                f"{outer.parent / path.name}"
            )
        refuse_files_on_the_way(path.parent)
        writable(path.parent)
        return path

    parse.__name__ = f"{suffix} file"
    return parse


def refuse_files_on_the_way(folder: Path) -> None:
    blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise argparse.ArgumentTypeError(
            f"{blocking} is a file, not a folder: pass a folder (it is created if missing)"
        )


def writable(folder: Path) -> None:
    """The folder, or the nearest one above it that exists, takes new files."""
    try:
        check_creatable(folder)
    except WriteFailed as err:
        raise argparse.ArgumentTypeError(str(err)) from None


MARKED_BY = {"metrics.json": "run", "multirun.yaml": "sweep"}  # a run's record, a sweep's config


def owned_folder_around(folder: Path) -> tuple[Path, str] | None:
    """The run's or sweep's folder that ``folder`` is or lies in, with the refusal's words for
    it (a tool writing there would write among its files); None if there is none."""
    folder = canonical(folder)
    for place in (folder, *folder.parents):
        for name, owner in MARKED_BY.items():
            if os.path.lexists(place / name):
                return (
                    place,
                    f"{place} is another {owner}'s folder (it holds that {owner}'s {name})",
                )
    return None


def run_folder_around(folder: Path) -> str | None:
    """``owned_folder_around``'s words alone."""
    found = owned_folder_around(folder)
    return None if found is None else found[1]
