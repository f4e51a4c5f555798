"""A typed record as an Avro datum and back, once the schemas are known: no registry here.

The run id is not in the Avro value: it is the Kafka key of every command and event (the
records are partitioned by it anyway), so repeating it in the value cost ~100 bytes a step.
``Record.run_id`` is filled from the key on decode and ignored by the encoder.

Likewise ``Record.schema_version`` is not in the Avro value: on decode it is the registry's version
of the writer schema (the id in the frame) under the record's subject -- ToolCallCompleted written
with the second registered ToolCallCompleted schema reads as 2, whichever code reads it. The
encoder ignores it: the frame's schema id already says which schema wrote the record.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import operator
from collections.abc import Callable
from typing import Any

from fastavro import schemaless_reader

from runtime.errors import AgentlogError
from runtime.log.records.events import Record
from runtime.log.schemas.frame import HEADER_SIZE, NotFramed
from runtime.log.schemas.frame import schema_id_of as frame_schema_id

# What a reader of one schema id needs: the record class, the writer schema and the local reader
# schema (both parsed), and the writer schema's registry version under its subject.
Reader = tuple[type[Record], Any, Any, int]


class DecodeError(AgentlogError):
    """Bytes that are not a record this code can read; carries the raw bytes."""

    def __init__(self, message: str, data: bytes | None = None) -> None:
        super().__init__(message)
        self.data = data


def record_to_dict(record: object, _ctx: object | None = None) -> dict[str, Any]:
    """The record's fields as the Avro datum's values (``_ctx``: the serializer's SerializationContext,
    unused). Every appended event goes through here: one C-level attrgetter per type, not a getattr
    per field."""
    names, values = _getters.get(type(record)) or _getter(type(record))
    return dict(zip(names, values(record), strict=True))


_getters: dict[type, tuple[tuple[str, ...], Callable[[object], tuple[Any, ...]]]] = {}


def _getter(cls: type) -> tuple[tuple[str, ...], Callable[[object], tuple[Any, ...]]]:
    names = field_names(cls)
    values: Callable[[object], tuple[Any, ...]]
    if len(names) > 1:
        values = operator.attrgetter(*names)
    else:  # attrgetter of one name returns the value, not a 1-tuple
        values = lambda record: tuple(getattr(record, name) for name in names)  # noqa: E731
    _getters[cls] = (names, values)
    return names, values


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """The dataclass's field names, cached (``dataclasses.fields`` rebuilds a tuple per call)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _record_from_dict(cls: type[Record], values: dict[str, Any], key: bytes | None, version: int) -> Record:
    values["run_id"] = key.decode("utf-8", "replace") if key else ""
    values["schema_version"] = version  # from the frame: not in the Avro value (see the module docstring)
    occurred = values.get("occurred_at")
    if isinstance(occurred, dt.datetime):
        values["occurred_at"] = int(occurred.timestamp() * 1000)
    for name, value in values.items():
        if isinstance(value, dt.datetime):  # other timestamp-millis fields (TimerScheduled.fire_at)
            values[name] = int(value.timestamp() * 1000)
    return cls(**values)


def read_datum(reader: Reader, data: bytes, key: bytes | None) -> Record:
    """The record framed in ``data``, read with ``reader``'s writer schema into its local shape."""
    cls, writer, local, version = reader
    try:
        values = schemaless_reader(io.BytesIO(data[HEADER_SIZE:]), writer, local)
    except Exception as exc:
        raise DecodeError(f"cannot decode {cls.__name__}: {exc}", data) from exc
    if not isinstance(values, dict):
        raise DecodeError(f"cannot decode {cls.__name__}: not a record", data)
    try:
        return _record_from_dict(cls, values, key, version)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"cannot decode {cls.__name__}: {exc}", data) from exc


def schema_id_of(data: bytes) -> int:
    """The writer schema id in ``data``'s frame; DecodeError (carrying the bytes) if unframed."""
    try:
        return frame_schema_id(data)
    except NotFramed as error:
        raise DecodeError(str(error), data) from error
