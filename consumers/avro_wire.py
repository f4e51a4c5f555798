"""Bytes-level Avro helpers for the sink's hot path: varints and the object-container framing.

The sink never decodes an event in Python. It re-frames each Confluent message (magic byte,
4-byte schema id, Avro datum) as one datum of an Avro *container* whose schema is the writer's
schema with a few metadata fields in front (see :mod:`consumers.columns`); ClickHouse decodes the
container in C++. Prepending fields to an Avro datum is just concatenating their encodings, so
the per-message Python work is a few varints and a ``bytes.join``.
"""

from __future__ import annotations

import json
import os
from typing import Any

_SMALL = tuple(bytes([n]) for n in range(0x80))
_MAGIC = b"Obj\x01"


def zigzag(value: int) -> bytes:
    """Avro's encoding of an int or long: zig-zag, then little-endian base-128 varint."""
    n = (value << 1) ^ (value >> 63)
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_string(text: str) -> bytes:
    """Avro's encoding of a string: its UTF-8 length as a long, then the bytes."""
    raw = text.encode()
    return zigzag(len(raw)) + raw


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """Decode one Avro long at ``pos``; return (value, position after it)."""
    shift = 0
    n = 0
    while True:
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def container(schema: dict[str, Any], body: bytes, count: int, sync: bytes | None = None) -> bytes:
    """An Avro object container holding ``count`` datums already encoded back to back in ``body``.

    One block, codec ``null``: the data is read once, in-process or over a local socket, so
    compressing it would only cost CPU.
    """
    marker = sync or os.urandom(16)
    header = bytearray(_MAGIC)
    meta = {"avro.schema": json.dumps(schema, separators=(",", ":")).encode(), "avro.codec": b"null"}
    header += zigzag(len(meta))
    for key, value in meta.items():
        header += avro_string(key) + zigzag(len(value)) + value
    header += zigzag(0) + marker
    return b"".join((bytes(header), zigzag(count), zigzag(len(body)), body, marker))
