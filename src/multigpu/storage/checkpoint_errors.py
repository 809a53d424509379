"""A checkpoint that breaks a declared rule (``checkpoint_model``), said in one line: pydantic's
first error, by its type, place and context, in the words of the rule it breaks."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import GetCoreSchemaHandler, ValidationError
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

EDITED = "it was edited, or not written by train.py"
# What an error of pydantic's own says the value should have been, by the error's type.
EXPECTED = {"dict_type": "a dict", "model_type": "a dict", "list_type": "a list"}
EXPECTED |= {"string_type": "a name (str)", "invalid_key": "a name (str)"}  # a dict's keys
# What the line says after the place, by the error's type.
SAID = {"missing": "is missing", "too_short": "is empty, expected at least one"}
SAID |= {"malformed": "{words}", "key": "has the key {value}, expected {words}"}
SHORT = reprlib.Repr()  # a value's own text, cut short
SHORT.maxstring, SHORT.maxother, SHORT.maxlist = 60, 60, 16


@dataclass(frozen=True)
class Expected:
    """The words an error says a type with: one error where pydantic has one per member of a
    union. With ``shape``, only that outer check gets the words; the value is then checked as
    declared, and an error within it is said at its own place."""

    words: str
    shape: Any = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        declared = handler(source)
        outer = declared if self.shape is None else handler.generate_schema(self.shape)
        said = core_schema.custom_error_schema(
            outer, custom_error_type="expected", custom_error_message=self.words
        )
        return said if self.shape is None else core_schema.chain_schema([said, declared])


def wrong(text: str, *at: Any) -> PydanticCustomError:
    """A rule broken at the place validated, or at ``at`` within it."""
    return PydanticCustomError("malformed", text, {"at": at})


def disagree(said: str, *at: Any) -> PydanticCustomError:
    """A rule between two parts of the file: ``said`` names both."""
    return wrong(f"{said}: the two disagree", *at)


def refused(text: str) -> PydanticCustomError:
    """A rule whose own sentence says what the file is and what to do, place and all."""
    return PydanticCustomError("refused", text)


def describe(value: Any) -> str:
    """A value in a few words: its type, and its own text when short."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, Mapping):
        return f"a dict of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    plain = value is None or isinstance(value, (bool, int, float, str))
    return SHORT.repr(value) if plain else f"a {type(value).__name__}"


def place(loc: list[Any]) -> str:
    """``loops.fit_loop['epoch_loop.state_dict']``: a place in the checkpoint, as code reads it."""
    where = ""
    for key in loc:
        name = isinstance(key, str) and key.isidentifier() and key.isascii()
        where += (f".{key}" if where else key) if name else f"[{SHORT.repr(key)}]"
    return where


def explain(err: ValidationError) -> str:
    """What follows ``ckpt_path=<file>`` in the line that refuses it: a rule's own sentence,
    or where the file is malformed and how."""
    error = err.errors(include_url=False)[0]
    kind, value, words = error["type"], describe(error["input"]), error["msg"]
    loc = [*error["loc"], *error.get("ctx", {}).get("at", ())]
    if kind == "refused":
        return words
    if kind == "invalid_key":  # a model's own key: pydantic's place is the key
        loc.append("[key]")
    if loc[-1:] == ["[key]"]:  # a dict's key: said at the dict
        *loc, key, _ = loc
        kind, value = "key", describe(key)
    said = SAID.get(kind, "is {value}, expected {words}")
    said = said.format(value=value, words=EXPECTED.get(error["type"], words))
    where = place(loc) or ("" if kind == "malformed" else "it")  # a rule between parts: no place
    return f"is malformed: {' '.join(filter(None, (where, said)))}; {EDITED}"
