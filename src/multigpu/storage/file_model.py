"""A file's schema declared as a pydantic model, and the one place where its refusal becomes a
``BadRecord``: the first problem, said where it is (``history[3].epoch``), what it is and what
the model's JSON Schema (the one docs/records.md publishes) says it should be."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.json_schema import GenerateJsonSchema

from multigpu.storage.json_file import BadRecord, name_of, shown

NOUNS = {"integer": "a whole number", "number": "a number", "string": "a string", "null": "null"}
NOUNS |= {"boolean": "true or false", "array": "a list", "object": "an object"}
BOUNDS = {"minimum": "from", "maximum": "to", "pattern": "matching"}


class FileModel(BaseModel):
    """Strict (a quoted ``"5"`` is no number, ``true`` no 1); keys a newer version adds are
    kept."""

    model_config = ConfigDict(strict=True, extra="allow")


def checked(path: Path, data: Any, model: type[BaseModel]) -> Any:
    """``data`` as it is, once ``model`` accepts it; else its first problem, naming ``path``."""
    try:
        model.model_validate(data)
    except ValidationError as error:
        raise BadRecord(path, problem(error.errors(include_url=False)[0], data, model)) from None
    return data


def problem(error: dict[str, Any], data: Any, model: type[BaseModel]) -> str:
    kind, loc, schema = error["type"], error["loc"], json_schema(model)
    if kind == "missing":
        return f"{name_of((*locate(data, loc[:-1])[0], loc[-1]))} is missing"
    where, value = locate(data, loc)
    if loc[-1:] == ("[key]",):  # a key refused: the location names it, then "[key]"
        where, key = where[:-1], where[-1]
        pattern = next(iter(part(schema, where)["patternProperties"]))
        return f"{name_of(where)} has a key {shown(key)}, not a string matching {pattern}"
    if kind == "value_error":  # a rule between keys (a ``model_validator``): it names them
        rule = error["ctx"]["error"]
        return f"{name_of(where)} {rule}" if where else str(rule)
    if kind == "too_long":
        return f"{name_of(where)} has {len(value)} keys (at most {error['ctx']['max_length']})"
    said = f"{name_of(where)} is" if where else "holds"
    return f"{said} {shown(value)}, not {expected(part(schema, where), schema)}"


def locate(data: Any, loc: tuple) -> tuple[tuple, Any]:
    """The part of ``data`` a pydantic location leads to, and its path; the location may go
    on past it, naming the member of a union that refused it (``str``, ``float``)."""
    where: tuple = ()
    for key in loc:
        listed = isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data)
        if not (listed or isinstance(data, dict) and key in data):
            break
        where, data = (*where, key), data[key]
    return where, data


class Untitled(GenerateJsonSchema):
    """No titles on the keys ("Test Acc" for ``test_acc``): their descriptions say it."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@functools.cache
def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(schema_generator=Untitled)


def part(root: dict, where: tuple) -> dict:
    """The JSON Schema, under ``root``, of the value at ``where``."""
    fragment = root
    for key in where:
        options = [resolved(o, root) for o in resolved(fragment, root).get("anyOf", [fragment])]
        fragment = next((found for o in options if (found := inside(o, key))), {})
    return resolved(fragment, root)


def inside(fragment: dict, key: Any) -> dict | None:
    """The schema of item or key ``key`` of ``fragment``'s values, if they have one."""
    if isinstance(key, int):
        return fragment.get("items")
    values = fragment.get("additionalProperties")
    return (
        fragment.get("properties", {}).get(key)
        or next(iter(fragment.get("patternProperties", {}).values()), None)
        or (values if isinstance(values, dict) else None)
    )


def resolved(fragment: dict, root: dict) -> dict:
    ref = fragment.get("$ref", "")
    return root["$defs"][ref.rsplit("/", 1)[-1]] if ref else fragment


def expected(fragment: dict, root: dict) -> str:
    """What a JSON Schema accepts, in words: ``a whole number from 0 or null``."""
    fragment = resolved(fragment, root)
    if "anyOf" in fragment:
        return " or ".join(expected(option, root) for option in fragment["anyOf"])
    if "enum" in fragment:
        return "one of " + ", ".join(map(str, fragment["enum"]))
    bounds = [f"{BOUNDS[k]} {fragment[k]}" for k in BOUNDS if k in fragment]
    return " ".join([NOUNS.get(fragment.get("type", ""), "a valid value"), *bounds])
