"""Does a workflow input have the shape the workflow declares? (pure logic)"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

_JSON_TYPES: dict[type, str] = {
    dict: "a JSON object",
    list: "a JSON array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
}


def shape_error(declared: Any, value: Any) -> str | None:
    """None if ``value`` fits ``declared`` (the annotation of the workflow's input), else why not."""
    if declared is None or declared is Any:
        return None
    origin = typing.get_origin(declared) or declared
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        try:
            origin.model_validate(value)
        except ValidationError as error:
            return str(error).replace("\n", "; ")
        return None
    if origin in _JSON_TYPES:
        ok = isinstance(value, origin) and not (origin is int and isinstance(value, bool))
        if origin is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            return f"expected {_JSON_TYPES[origin]}, got {type(value).__name__}"
    return None


def coerce_input(declared: Any, value: Any) -> Any:
    """The value the workflow receives: a pydantic model is built from the JSON, anything else passes."""
    origin = typing.get_origin(declared) or declared
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        return origin.model_validate(value)
    return value
