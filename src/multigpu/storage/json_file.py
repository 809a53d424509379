"""A JSON file others wrote, read within bounds before any schema sees it: a regular file of at
most ``MAX_BYTES``, UTF-8, JSON, nesting at most ``MAX_DEPTH`` deep, strings of at most
``MAX_STRING`` characters and whole numbers of at most ``MAX_INTEGER``, whatever its keys. A
file that breaks one gives one ``BadRecord``: its name, then its first problem, on one line.

Older versions wrote a non-finite float as a bare ``NaN``/``Infinity`` token, which strict JSON
parsers reject; it meant "no finite value", so it is read as null, as this version writes it.
"""

from __future__ import annotations

import json
import math
import re
import stat
from pathlib import Path
from typing import Any

MAX_BYTES = 10 * 1024 * 1024  # a record of 10 000 epochs is under 5 MB
MAX_DEPTH = 32  # a record nests 4 levels deep (history -> entry -> value)
MAX_STRING = 64 * 1024  # characters in any one string (an error line is at most 500)
MAX_INTEGER = 10**300  # an integer beyond this cannot become a float: arithmetic would raise
PROBLEM_CHARS = 200  # of the problem's description (the file's name is given whole)
NUMBER_TAIL = re.compile(r"[-+.eE0-9]{1,32}")


class BadRecord(ValueError):
    """A file no reader can trust; ``str()`` is one line: the file, then its first problem."""

    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        self.problem = one_line(problem)[:PROBLEM_CHARS]
        super().__init__(f"{one_line(str(path))}: {self.problem}")


def one_line(text: str) -> str:
    """Control characters (newlines included) as spaces: a message stays on its line."""
    return "".join(" " if ch.isspace() or not ch.isprintable() else ch for ch in text)


def read_json(path: Path) -> Any:
    """The file's JSON, within the bounds: a hostile or broken file costs at most
    ``MAX_BYTES`` of reading and never a RecursionError."""
    text = decode(path, read_bounded(path))
    if not text.strip():
        raise BadRecord(path, "is empty")
    try:
        data = json.loads(
            text,
            parse_constant=lambda _: None,
            parse_float=finite_or_none,
            object_pairs_hook=without_repeats,
        )
    except RecursionError:
        raise BadRecord(path, f"nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as error:
        raise BadRecord(path, describe_syntax_error(text, error)) from None
    except RepeatedKey as repeated:
        raise BadRecord(path, f"holds the key {shown(str(repeated))} twice in one object") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise BadRecord(path, f"is not valid JSON ({error})") from None
    if problem := out_of_bounds(data):
        raise BadRecord(path, problem)
    return data


class RepeatedKey(ValueError):
    """A key given twice in one object: JSON keeps the last, so the file says two things."""


def without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise RepeatedKey(next(key for key in keys if keys.count(key) > 1))
    return dict(pairs)


def read_bounded(path: Path) -> bytes:
    """The file's bytes, refused without reading them when it is no regular file or too big."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise BadRecord(path, "is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise BadRecord(path, "is not a regular file")
        if info.st_size > MAX_BYTES:
            size, limit = f"{info.st_size / 2**20:.1f} MiB", f"{MAX_BYTES // 2**20} MiB"
            raise BadRecord(path, f"is {size}, more than such a file can be ({limit}): not read")
        with open(path, "rb") as file:
            data = file.read(info.st_size + 1)  # one more: to see a file that grew
    except FileNotFoundError:
        raise BadRecord(path, "does not exist") from None
    except OSError as error:
        raise BadRecord(
            path, f"cannot be read ({error.strerror or type(error).__name__})"
        ) from None
    if len(data) > info.st_size:
        raise BadRecord(path, "grew while it was read (still being written in place?)")
    return data


def decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = data[error.start]
        raise BadRecord(
            path, f"is not UTF-8 text (byte 0x{byte:02x} at offset {error.start})"
        ) from None


def finite_or_none(literal: str) -> float | None:
    """A float too large for a double (``1e999``) is no finite number: null, as NaN."""
    value = float(literal)
    return value if math.isfinite(value) else None


def describe_syntax_error(text: str, error: json.JSONDecodeError) -> str:
    """A parser that failed at the end of the text, or in its last token (a string never
    closed, ``nu`` of ``null``, ``0.`` of a number), read what a truncated file gives."""
    rest = text[error.pos :].strip()
    if (
        not rest
        or error.msg.startswith("Unterminated string")
        or any(word.startswith(rest) for word in ("null", "true", "false"))
        or NUMBER_TAIL.fullmatch(rest)
    ):
        return "ends in the middle of its JSON (cut short: truncated, or still being written?)"
    return f"is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"


def out_of_bounds(value: Any, where: tuple = ()) -> str | None:
    """The first value, in the file's order, nested deeper than ``MAX_DEPTH``, string (keys
    too) longer than ``MAX_STRING`` or whole number beyond ``MAX_INTEGER``; None when there is
    none. The recursion stops at ``MAX_DEPTH``: a deep file cannot exhaust the stack."""
    if isinstance(value, str) and len(value) > MAX_STRING:
        return too_long(name_of(where), len(value))
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        return f"{name_of(where)} is a whole number beyond 10^300 either way"
    if not isinstance(value, (dict, list)):
        return None
    if len(where) >= MAX_DEPTH:
        return f"{name_of(where)} nests deeper than {MAX_DEPTH} levels"
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        if isinstance(key, str) and len(key) > MAX_STRING:
            return too_long(f"a key in {name_of(where)}", len(key))
        if problem := out_of_bounds(item, (*where, key)):
            return problem
    return None


def too_long(what: str, length: int) -> str:
    return f"{what} is a string of {length} characters (at most {MAX_STRING})"


def name_of(where: tuple) -> str:
    """``("history", 3, "epoch")`` as ``history[3].epoch``."""
    parts = (f"[{key}]" if isinstance(key, int) else f".{short_key(key)}" for key in where)
    return "".join(parts).lstrip(".") or "the file's value"


def short_key(key: str) -> str:
    return key if len(key) <= 40 else key[:37] + "..."


def shown(value: Any) -> str:
    """A value as a message shows it: containers by kind, anything else as JSON, short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
