"""Avro binary encoders compiled per record type: the same bytes as fastavro's schemaless_writer.

Every appended record is encoded, several per step. fastavro walks the parsed schema for every
record (a type dispatch per field, a union search per optional field), which costs a record of a
dozen fields ~20 µs -- more than the rest of its step's bookkeeping. A compiled encoder is a flat
list of one small writer per field, chosen once from the schema, reading the fields straight off
the record (no intermediate dict).

It covers what the record schemas use: null, boolean, int, long (timestamp-millis too), string,
arrays and maps of those, and unions of null with one of them. A schema with anything else
compiles to None (fastavro writes that type). A value whose Python type is not the one the
schema expects (a datetime for a timestamp, a bool for a long, an out-of-range int ...) raises
``Unencodable``, and the caller writes that record with fastavro, which converts it or refuses it
with its own error: the compiled path never guesses.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Writer = Callable[[Any, list[bytes]], None]

_MIN_LONG, _MAX_LONG = -(1 << 63), (1 << 63) - 1
_MIN_INT, _MAX_INT = -(1 << 31), (1 << 31) - 1
# Most ints written are small (positions, attempts, counts, lengths): their bytes are looked up.
_SMALL = 4096
_SMALL_VARINTS: list[bytes] = []


class Unencodable(Exception):
    """A value the compiled encoder does not write; fastavro decides what to do with it."""


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL_VARINTS.extend(_varint(n) for n in range(-_SMALL, _SMALL))


def _long_bytes(n: Any, low: int = _MIN_LONG, high: int = _MAX_LONG) -> bytes:
    if type(n) is not int or not low <= n <= high:
        raise Unencodable(n)
    if -_SMALL <= n < _SMALL:
        return _SMALL_VARINTS[n + _SMALL]
    return _varint(n)


def _write_long(value: Any, out: list[bytes]) -> None:
    out.append(_long_bytes(value))


def _write_int(value: Any, out: list[bytes]) -> None:
    out.append(_long_bytes(value, _MIN_INT, _MAX_INT))


def _write_string(value: Any, out: list[bytes]) -> None:
    if type(value) is not str:
        raise Unencodable(value)
    data = value.encode()
    out.append(_long_bytes(len(data)))
    out.append(data)


def _write_boolean(value: Any, out: list[bytes]) -> None:
    if value is True:
        out.append(b"\x01")
    elif value is False:
        out.append(b"\x00")
    else:
        raise Unencodable(value)


def _write_null(value: Any, out: list[bytes]) -> None:
    if value is not None:
        raise Unencodable(value)


_PRIMITIVES: dict[str, Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": _write_long,
    "string": _write_string,
}
_LOGICAL_LONGS = {"timestamp-millis", "timestamp-micros"}


def _array(items: Writer) -> Writer:
    def write(value: Any, out: list[bytes]) -> None:
        if type(value) is not list:
            raise Unencodable(value)
        if value:  # one block of len(value) items, then the empty block that ends the array
            out.append(_long_bytes(len(value)))
            for item in value:
                items(item, out)
        out.append(b"\x00")

    return write


def _map(values: Writer) -> Writer:
    def write(value: Any, out: list[bytes]) -> None:
        if type(value) is not dict:
            raise Unencodable(value)
        if value:
            out.append(_long_bytes(len(value)))
            for key, item in value.items():
                _write_string(key, out)
                values(item, out)
        out.append(b"\x00")

    return write


def _optional(other: Writer, null_first: bool) -> Writer:
    null_index, other_index = (b"\x00", b"\x02") if null_first else (b"\x02", b"\x00")

    def write(value: Any, out: list[bytes]) -> None:
        if value is None:
            out.append(null_index)
        else:
            out.append(other_index)
            other(value, out)

    return write


def _writer(schema: Any) -> Writer | None:
    """The writer of one schema, or None for a type this module does not compile."""
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema)
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        other = _writer(schema[1] if schema[0] == "null" else schema[0])
        return None if other is None or schema[0] == schema[1] else _optional(other, schema[0] == "null")
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if kind == "long" and logical in _LOGICAL_LONGS:
        return _write_long  # an int is written as is; anything else (a datetime) goes to fastavro
    if logical is not None:
        return None
    if kind == "array":
        items = _writer(schema.get("items"))
        return None if items is None else _array(items)
    if kind == "map":
        values = _writer(schema.get("values"))
        return None if values is None else _map(values)
    if isinstance(kind, str) and set(schema) <= {"type", "doc"}:
        return _PRIMITIVES.get(kind)
    return None


def compile_record(schema: dict[str, Any], cls: type) -> Callable[[object], bytes] | None:
    """An encoder of ``cls`` instances by the record schema ``schema`` (each field read as the
    attribute of its name), or None when the schema uses a type this module does not compile or
    names a field ``cls`` does not have."""
    if schema.get("type") != "record":
        return None
    fields = schema.get("fields", [])
    writers: list[Writer] = []
    names: list[str] = []
    for field in fields:
        writer = _writer(field.get("type"))
        if writer is None or field["name"] not in getattr(cls, "__dataclass_fields__", {}):
            return None
        writers.append(writer)
        names.append(field["name"])
    if not names:
        return None
    values_of: Callable[[object], tuple[Any, ...]]
    if len(names) > 1:
        values_of = operator.attrgetter(*names)
    else:  # attrgetter of one name returns the value, not a 1-tuple
        values_of = lambda record: (getattr(record, names[0]),)  # noqa: E731
    writers_in_order = tuple(writers)

    def encode(record: object) -> bytes:
        out: list[bytes] = []
        for write, value in zip(writers_in_order, values_of(record), strict=True):
            write(value, out)
        return b"".join(out)

    return encode
