"""``python -m multigpu.storage.schemas [--write FILE]``: the JSON Schemas of ``metrics.json``
and ``phases.json``, generated from their models, printed, or written between FILE's two
markers, where docs/records.md publishes them (a test compares the two)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from multigpu.storage.file_model import json_schema
from multigpu.storage.phases_model import Phases
from multigpu.storage.record_model import Record

COMMAND = "python -m multigpu.storage.schemas --write docs/records.md"
BEGIN = f"<!-- generated from the models by {COMMAND} -->\n\n"
END = "<!-- end of the generated schemas -->"
WIDTH = 100  # characters per line, as in the rest of docs/


def section() -> str:
    """What goes between the markers."""
    files = {"metrics.json": Record, "phases.json": Phases}
    return "\n".join(
        f"`{n}`:\n\n```json\n{compact(json_schema(m))}\n```\n" for n, m in files.items()
    )


def compact(value: Any, indent: str = "", key: str = "") -> str:
    """``value`` as indented JSON, each part on one line where it fits in ``WIDTH``."""
    line = indent + key + json.dumps(value)
    if len(line) <= WIDTH or not isinstance(value, (dict, list)) or not value:
        return line
    items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
    inner = ",\n".join(
        compact(item, indent + "  ", "" if name is None else f"{json.dumps(name)}: ")
        for name, item in items
    )
    ends = "{}" if isinstance(value, dict) else "[]"
    return f"{indent}{key}{ends[0]}\n{inner}\n{indent}{ends[1]}"


def published(text: str) -> str:
    """What ``text`` holds between the markers."""
    return text.split(BEGIN, 1)[-1].split(END, 1)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m multigpu.storage.schemas", description=__doc__)
    parser.add_argument("--write", type=Path, metavar="FILE", help="FILE to write them into")
    path = parser.parse_args(argv).write
    if path is None:
        print(section(), end="")
    elif BEGIN not in (text := path.read_text()) or END not in text:
        parser.error(f"{path} has no markers {BEGIN.strip()} ... {END}")
    else:
        head, rest = text.split(BEGIN, 1)
        path.write_text(head + BEGIN + section() + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
