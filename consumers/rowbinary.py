"""Rows in ClickHouse's RowBinary format, for the sink's few non-Avro inserts.

clickhouse-connect's ``insert`` would do the same, but its first call imports its whole column
codec stack (pandas and numpy support included: ~0.6 s, once per process, on the writer's
critical path). These rows are rare (undecodable records), so a few lines of encoding are the
cheaper way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

_INT32 = struct.Struct("<i")


def uleb128(value: int) -> bytes:
    """An unsigned LEB128 varint: RowBinary's length prefix."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def string(value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return uleb128(len(raw)) + raw


def int32(value: int) -> bytes:
    return _INT32.pack(value)


def fixed(value: bytes, size: int) -> bytes:
    if len(value) != size:
        raise ValueError(f"FixedString({size}) value of {len(value)} bytes")
    return value


def rows(encoded: Iterable[Sequence[bytes]]) -> bytes:
    """The RowBinary body of rows whose fields are already encoded, in column order."""
    return b"".join(field for row in encoded for field in row)
