"""A PydanticAI agent run's request parameters turned into their recorded form once, not once a request.

Every model request records its parameters (``units.recorded_parameters``: tool definitions,
output schema, instruction parts ...), and they are the same from one request to the next: dumping
them to JSON again at every step was a visible share of a step's CPU. PydanticAI builds a new
``ModelRequestParameters`` for each request, with new lists and new ``ToolDefinition`` copies, but
the values in them (names, descriptions, JSON schemas) are the same objects. So the dump is kept
with a fingerprint of those values by identity, as runtime.integrations.pydantic_ai.message_forms
keeps a message's forms, and the parameters are dumped again when any of them is another object
(a tool added, removed or changed, another output type, other instructions).

The fingerprint reaches three levels into containers and dataclasses: the parameters' fields; the
items of a list, set, tuple or dict field and a dataclass field's own fields; those items' fields
when they are dataclasses (a ``ToolDefinition``'s ``parameters_json_schema``). Values there are
compared by identity, except a dict or list: the durable path hands each request a JSON schema
copied anew (the same content, another object), so such a value is marked by its JSON
(``orjson``, keys in their order: ``1``, ``1.0`` and ``true`` differ) and compared by it and by
equality (a NaN dumps as ``null``). Anything else -- a value orjson cannot dump, a non-dataclass
object -- is compared by identity, and parameters that are not a dataclass are never reused. The
dump is a function of the parameters alone, so a replayed agent records the same parameters as
the run it replays.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import orjson

_Dump = Callable[[Any, str], Any]
_COLLECTIONS = (list, tuple, set, frozenset)
_PLAIN = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _field_values(value: Any) -> tuple[Any, ...] | None:
    """A dataclass instance's field values (what its dump is made of: not a cached property's,
    which one request has and another not); None if ``value`` is not one."""
    kind = type(value)
    read = _READERS.get(kind)
    if read is None:
        if not dataclasses.is_dataclass(kind):
            return None
        names = [field.name for field in dataclasses.fields(kind)]
        # attrgetter of 2+ names: a tuple of the values, read in C; 0 or 1 field by hand.
        read = _READERS[kind] = attrgetter(*names) if len(names) >= 2 else _one_by_one(names)
    try:
        return read(value)
    except AttributeError:  # a field never set (init=False): not read, never reused
        return None


def _one_by_one(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    return lambda value: tuple(getattr(value, name) for name in names)


_READERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


class _Json(tuple[bytes, Any]):
    """A dict or list's mark: its JSON and itself, equal when both are (see the module docstring)."""

    __slots__ = ()


def _json_mark(value: Any) -> Any:
    try:
        # Passthrough: a subclass (a str enum ...) or a dataclass raises, and is marked by identity.
        data = orjson.dumps(value, option=_PLAIN)
    except orjson.JSONEncodeError:
        return value
    return _Json((data, value))


def _add(marks: list[Any], value: Any, depth: int) -> None:
    """``value``'s marks: itself (a leaf, by identity) or its type, size and contents' marks."""
    kind = type(value)
    if depth == 0:
        marks.append(_json_mark(value) if kind is dict or kind is list else value)
    elif kind in _COLLECTIONS:
        marks += (kind, len(value))
        for item in value:
            _add(marks, item, depth - 1)
    elif kind is dict:
        marks += (kind, len(value))
        for key, item in value.items():
            marks.append(key)
            _add(marks, item, depth - 1)
    elif (fields := _field_values(value)) is not None:
        marks += (kind, len(fields))
        for item in fields:
            _add(marks, item, depth - 1)
    else:
        marks.append(value)


def _same(kept: Any, mark: Any) -> bool:
    return kept is mark or (type(kept) is _Json and type(mark) is _Json and kept == mark)


def fingerprint(parameters: Any) -> list[Any] | None:
    """The values ``parameters``' dump is made of, to compare by identity at the next request;
    None when it is not a dataclass instance (then never reused)."""
    if _field_values(parameters) is None:
        return None
    marks: list[Any] = []
    _add(marks, parameters, 3)
    return marks


class ParameterForms:
    """One agent run's last recorded request parameters, by the name of what they parameterize."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[str, tuple[list[Any], Any]] = {}

    def recorded(self, parameters: Any, what: str, dump: _Dump) -> Any:
        """``dump(parameters, what)``, or the dump kept from the request before when the
        parameters are made of the same values. The dump returned is shared: not to be changed."""
        marks = fingerprint(parameters)
        kept = self._kept.get(what)
        if (
            marks is not None
            and kept is not None
            and len(kept[0]) == len(marks)
            and all(map(_same, kept[0], marks))
        ):
            return kept[1]
        dumped = dump(parameters, what)
        if marks is not None:
            self._kept[what] = (marks, dumped)  # the marks hold the values: no id can be reused
        return dumped


_BY_RUN: weakref.WeakKeyDictionary[object, ParameterForms] = weakref.WeakKeyDictionary()


def parameter_forms_of(run: object) -> ParameterForms:
    """The parameter forms kept for ``run`` (an agent run), made on first use, let go with it."""
    forms = _BY_RUN.get(run)
    if forms is None:
        forms = _BY_RUN[run] = ParameterForms()
    return forms
