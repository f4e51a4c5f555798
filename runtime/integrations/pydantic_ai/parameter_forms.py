"""A PydanticAI agent run's request parameters turned into their recorded form once, not once a request.

Every model request records its parameters (``units.recorded_parameters``: tool definitions,
output schema, instruction parts ...), and they are the same from one request to the next: dumping
them to JSON again at every step was a visible share of a step's CPU. PydanticAI builds a new
``ModelRequestParameters`` for each request, with new lists and new ``ToolDefinition`` copies, but
the values in them (names, descriptions, JSON schemas) are the same objects. So the dump is kept
with a fingerprint of those values by identity, as runtime.integrations.pydantic_ai.message_forms
keeps a message's forms, and the parameters are dumped again when any of them is another object
(a tool added, removed or changed, another output type, other instructions).

The fingerprint reaches two levels into containers and dataclasses: the parameters' fields; the
items of a list, set, tuple or dict field and a dataclass field's own fields; those items' fields
when they are dataclasses (a ``ToolDefinition``'s ``parameters_json_schema``). Values there are
compared by identity, not walked: a JSON schema changed in place, keeping its identity, would not
be seen -- PydanticAI makes a new one (as it makes a new part rather than editing a message's).
Anything the fingerprint does not know how to read is never reused. The dump is a function of the
parameters alone, so a replayed agent records the same parameters as the run it replays.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from operator import is_
from typing import Any

_Dump = Callable[[Any, str], Any]
_COLLECTIONS = (list, tuple, set, frozenset)


def _is_dataclass_instance(value: Any) -> bool:
    return hasattr(type(value), "__dataclass_fields__") and hasattr(value, "__dict__")


def _add(marks: list[Any], value: Any, depth: int) -> None:
    """``value``'s marks: itself (a leaf, by identity) or its type, size and contents' marks."""
    kind = type(value)
    if depth == 0:
        marks.append(value)
    elif kind in _COLLECTIONS:
        marks += (kind, len(value))
        for item in value:
            _add(marks, item, depth - 1)
    elif kind is dict:
        marks += (kind, len(value))
        for key, item in value.items():
            marks.append(key)
            _add(marks, item, depth - 1)
    elif _is_dataclass_instance(value):
        fields = value.__dict__
        marks += (kind, len(fields))
        for item in fields.values():
            _add(marks, item, depth - 1)
    else:
        marks.append(value)


def fingerprint(parameters: Any) -> list[Any] | None:
    """The values ``parameters``' dump is made of, to compare by identity at the next request;
    None when it is not a dataclass instance (then never reused)."""
    if not _is_dataclass_instance(parameters):
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
            and all(map(is_, kept[0], marks))
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
