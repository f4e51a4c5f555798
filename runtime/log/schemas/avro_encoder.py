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

from collections.abc import Callable, Iterable
from typing import Any

from runtime.errors import AgentlogError

Writer = Callable[[Any, list[bytes]], None]

_MIN_LONG, _MAX_LONG = -(1 << 63), (1 << 63) - 1
_MIN_INT, _MAX_INT = -(1 << 31), (1 << 31) - 1
# Most ints written are small (positions, attempts, counts, lengths): their bytes are looked up.
_SMALL = 4096
_SMALL_VARINTS: list[bytes] = []


class Unencodable(AgentlogError):
    """A value the compiled encoder does not write; fastavro decides what to do with it (the
    encoder's caller catches this: it never reaches a user)."""


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _zigzag_bytes(z: int) -> bytes:
    return bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7))  # z < 2**14 here


# n's zigzag is 2n for n >= 0 and -2n - 1 below: built from it directly, not through the general
# _varint (a tenth of the time: this table is built at every worker's start).
_SMALL_VARINTS.extend(_zigzag_bytes(-2 * n - 1) for n in range(-_SMALL, 0))
_SMALL_VARINTS.extend(_zigzag_bytes(2 * n) for n in range(_SMALL))


# The large ints written recently, encoded: most repeat from record to record -- a partition's
# epoch, the millisecond a turn's records were stamped in -- and a lookup is a tenth of _varint.
# Emptied when full (a value's bytes never change, so any thread may fill or empty it).
_RECENT: dict[int, bytes] = {}
_RECENT_MAX = 1024


def _long_bytes(n: Any, low: int = _MIN_LONG, high: int = _MAX_LONG) -> bytes:
    if type(n) is not int or not low <= n <= high:
        raise Unencodable(n)
    if -_SMALL <= n < _SMALL:
        return _SMALL_VARINTS[n + _SMALL]
    encoded = _RECENT.get(n)
    if encoded is None:
        if len(_RECENT) >= _RECENT_MAX:
            _RECENT.clear()
        encoded = _RECENT[n] = _varint(n)
    return encoded


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


def _write_bytes(value: Any, out: list[bytes]) -> None:
    if type(value) is not bytes:
        raise Unencodable(value)
    out.append(_long_bytes(len(value)))
    out.append(value)


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
    "bytes": _write_bytes,
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


def _inline(
    schema: Any, value: str, writers: dict[str, Writer], sealed: str | None = None
) -> list[str] | None:
    """Source lines appending the encoding of ``value`` (a local name) to ``out``; None if the
    schema is not compiled. Arrays and maps call their writer (kept in ``writers``). ``sealed``:
    the content field whose strings (an array's items too) are written sealed when the encoder
    is given a sealer."""
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema or schema[0] == schema[1]:
            return None
        null_first = schema[0] == "null"
        inner = _inline(schema[1] if null_first else schema[0], value, writers, sealed)
        if inner is None:
            return None
        null_index, other_index = (b"\x00", b"\x02") if null_first else (b"\x02", b"\x00")
        return [
            f"if {value} is None:",
            f"    append({null_index!r})",
            "else:",
            f"    append({other_index!r})",
            *(f"    {line}" for line in inner),
        ]
    kind = schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "long" and schema.get("logicalType") in _LOGICAL_LONGS:
            kind = "long"
        elif kind == "array" and set(schema) <= {"type", "items", "doc", "default"}:
            item = f"{value}i"
            inner = _inline(schema.get("items"), item, writers, sealed)
            if inner is None:
                return None
            return [  # one block of len(value) items, then the empty block that ends the array
                f"if type({value}) is not list: raise Unencodable({value})",
                f"if {value}:",
                f"    append(long_bytes(len({value})))",
                f"    for {item} in {value}:",
                *(f"        {line}" for line in inner),
                "append(b'\\x00')",
            ]
        elif kind == "map" or schema.get("logicalType") is not None:
            if sealed is not None:
                return None  # no content field is a map: its values would be written in the clear
            writer = _writer(schema)
            if writer is None:
                return None
            name = f"w{len(writers)}"
            writers[name] = writer
            return [f"{name}({value}, out)"]
        elif not set(schema) <= {"type", "doc"}:
            return None
    if kind in ("long", "int"):
        low, high = (_MIN_LONG, _MAX_LONG) if kind == "long" else (_MIN_INT, _MAX_INT)
        return [
            f"if type({value}) is not int: raise Unencodable({value})",
            f"append(SMALL[{value} + {_SMALL}] if {-_SMALL} <= {value} < {_SMALL} "
            f"else long_bytes({value}, {low}, {high}))",
        ]
    if kind == "string":
        # Sealed here rather than in a copy of the record: a step writes ~5 sealed values, and a
        # pass of its own over them cost the step as much again as the encryption. The sealer
        # (runtime.log.sealing.sealer.Sealer) says which values to seal, and seals them.
        encoded = (
            [f"{value} = {value}.encode()"]
            if sealed is None
            else [
                f"if sealer is not None and sealer.needs_sealing({value}, {sealed!r}):",
                "    if cipher is None: cipher = sealer.cipher_of_run(record.run_id)",
                f"    {value} = cipher.seal_bytes({value}, {sealed!r})",
                "else:",
                f"    {value} = {value}.encode()",
            ]
        )
        return [
            f"if type({value}) is not str: raise Unencodable({value})",
            *encoded,
            f"append(SMALL[len({value}) + {_SMALL}] if len({value}) < {_SMALL} else long_bytes(len({value})))",
            f"append({value})",
        ]
    if kind == "bytes":
        return [
            f"if type({value}) is not bytes: raise Unencodable({value})",
            f"append(SMALL[len({value}) + {_SMALL}] if len({value}) < {_SMALL} else long_bytes(len({value})))",
            f"append({value})",
        ]
    if kind == "boolean":
        return [
            f"if {value} is True: append(b'\\x01')",
            f"elif {value} is False: append(b'\\x00')",
            f"else: raise Unencodable({value})",
        ]
    if kind == "null":
        return [f"if {value} is not None: raise Unencodable({value})"]
    return None


def compile_record(
    schema: dict[str, Any], cls: type, sealed: Iterable[str] = ()
) -> Callable[..., bytes] | None:
    """An encoder of ``cls`` instances by the record schema ``schema`` (each field read as the
    attribute of its name), or None when the schema uses a type this module does not compile or
    names a field ``cls`` does not have. ``sealed``: the content fields (CONTENT_FIELDS) whose
    text ``encode(record, sealer)`` writes sealed under the record's run's cipher -- as
    ``Sealer.sealed_fields`` would, without a copy of the record; ``encode(record)`` writes them
    in the clear.

    The encoder is generated source -- one straight run of appends, a field's checks inline --
    because a function call per field would cost as much as the encoding itself."""
    if schema.get("type") != "record":
        return None
    known = getattr(cls, "__dataclass_fields__", {})
    content = set(sealed)
    writers: dict[str, Writer] = {}
    body: list[str] = []
    for i, field in enumerate(schema.get("fields", [])):
        name = field.get("name")
        if not isinstance(name, str) or name not in known:
            return None
        value = f"v{i}"
        lines = _inline(field.get("type"), value, writers, name if name in content else None)
        if lines is None:
            return None
        body += [f"{value} = record.{name}", *lines]
    if not body:
        return None
    source = "def encode(record, sealer=None):\n    out = []\n    append = out.append\n    cipher = None\n"
    source += "".join(f"    {line}\n" for line in body)
    source += "    return b''.join(out)\n"
    namespace: dict[str, Any] = {
        "Unencodable": Unencodable,
        "SMALL": _SMALL_VARINTS,
        "long_bytes": _long_bytes,
        **writers,
    }
    exec(compile(source, f"<avro encoder of {schema.get('name')}>", "exec"), namespace)
    encode: Callable[..., bytes] = namespace["encode"]
    return encode
