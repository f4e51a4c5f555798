"""A PydanticAI agent run's request parameters turned into their recorded form once, not once a request.

Every model request records its parameters (``units.recorded_parameters``: tool definitions,
output schema, instruction parts ...), and they are the same from one request to the next: dumping
them to JSON again at every step was a visible share of a step's CPU. PydanticAI builds new
``ModelRequestParameters`` for each request, with new ``ToolDefinition`` copies, and the durable
path copies each tool's JSON schema anew (the same content, another object): so the parameters
are compared by what they are made of, not by the objects, and dumped again when that changes (a
tool added, removed or changed, another output type, other instructions).

The fingerprint is orjson's serialization of the parameters, in C: JSON values by their JSON, in
their order (``1``, ``1.0`` and ``true`` differ; keys in the order they were set), and, through
``default``, each dataclass instance as its type and its fields' values (not a cached property's),
a set as its type and its items in their order, anything else (a ``str`` subclass, a datetime, an
object orjson does not know) by identity (``id``, the object held while the fingerprint is kept,
so no id can be reused). Two fingerprints equal are parameters whose dumps are equal: the dump
(pydantic's ``to_jsonable_python``) is made of the same values, read the same way. A float NaN
or infinity reads as ``null`` like ``None``: the dump kept may hold the one where the parameters
hold the other, which every record and hash writes the same (they are made by orjson). Parameters
orjson refuses (a dict with a key that is not a string, an integer of more than 64 bits) are
dumped every time. The dump is a function of the parameters alone, so a replayed agent records
the same parameters as the run it replays.

Comparing the values in Python instead (walking fields, marking each by identity) cost as much as
the dump it saved; this costs about a third of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import orjson

from runtime.integrations.pydantic_ai.per_run import PerRun

_Dump = Callable[[Any, str], Any]
# Everything but JSON's own types goes through ``default``: a subclass, a dataclass, a datetime.
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# The tags that say how ``default`` read a value: a NUL-led string, which a schema or a tool's
# description would not begin with, followed by an id only a held object can have.
_DATACLASS, _SET, _IDENTITY = "\x00dataclass", "\x00set", "\x00id"
_READERS: dict[type, Callable[[Any], Any]] = {}


def _reader(kind: type) -> Callable[[Any], Any] | None:
    """A dataclass type's field values, read in C (``attrgetter``); None if ``kind`` is not one."""
    read = _READERS.get(kind)
    if read is None and dataclasses.is_dataclass(kind):
        names = [field.name for field in dataclasses.fields(kind)]
        # attrgetter of one name gives the value itself, not a 1-tuple: the same fingerprint either way
        read = _READERS[kind] = attrgetter(*names) if names else (lambda value: ())
    return read


class Fingerprint:
    """What a dump was made of: ``data`` (compared) and ``held`` (the objects ``data`` names by id)."""

    __slots__ = ("data", "held")

    def __init__(self, data: bytes, held: list[Any]) -> None:
        self.data = data
        self.held = held


def fingerprint(parameters: Any) -> Fingerprint | None:
    """``parameters``' fingerprint (the module docstring), None when they are not a dataclass
    instance or orjson refuses them (then never reused)."""
    if _reader(type(parameters)) is None:
        return None
    held: list[Any] = []

    def default(value: Any) -> Any:
        kind = type(value)
        held.append(value)
        read = _reader(kind)
        if read is not None:
            return (_DATACLASS, id(kind), read(value))  # may raise AttributeError: a field never set
        if kind is set or kind is frozenset:
            return (_SET, id(kind), list(value))
        return (_IDENTITY, id(value))

    try:
        return Fingerprint(orjson.dumps(parameters, default=default, option=_STRICT), held)
    except (orjson.JSONEncodeError, AttributeError):
        return None


class ParameterForms:
    """One agent run's last recorded request parameters, by the name of what they parameterize."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[str, tuple[Fingerprint, Any]] = {}

    def recorded(self, parameters: Any, what: str, dump: _Dump) -> Any:
        """``dump(parameters, what)``, or the dump kept from the request before when the
        parameters are made of the same values. The dump returned is shared: not to be changed."""
        found = fingerprint(parameters)
        kept = self._kept.get(what)
        if found is not None and kept is not None and kept[0].data == found.data:
            return kept[1]
        dumped = dump(parameters, what)
        if found is not None:
            self._kept[what] = (found, dumped)
        return dumped


# The forms kept for an agent run, made on first use, let go with it.
parameter_forms_of = PerRun(ParameterForms).of
