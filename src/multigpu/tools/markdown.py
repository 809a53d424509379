"""The one Markdown table writer of every report (benchmark, start-up cases, study, sweep summary,
GPU acceptance): cells formatted and escaped alike, so that a value holding ``|`` or a newline
cannot break a row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def cell(value: Any, fmt: str | None = None, empty: str = "-") -> str:
    """A value as a table shows it: ``empty`` for None, ``fmt`` when given, else four
    significant digits for a float and ``str`` for the rest."""
    if value is None:
        return empty
    if fmt is not None:
        return fmt.format(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a table; entries that are not strings go through ``cell``."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        texts = (entry if isinstance(entry, str) else cell(entry) for entry in row)
        lines.append("| " + " | ".join(escape(text) for text in texts) + " |")
    return lines


def escape(text: str) -> str:
    return text.replace("\\|", "|").replace("|", "\\|").replace("\n", " ")
