"""The Confluent wire frame in front of every record value: magic byte 0, then the writer
schema's registry id as 4 big-endian bytes, then the Avro datum.

Defined once here; the serde and the sink (which reads the id straight from the bytes, in
Python and in ClickHouse SQL) both use it.
"""

from __future__ import annotations

from typing import Final

from runtime.errors import AgentlogError

MAGIC: Final = 0
MAGIC_BYTE: Final = b"\x00"
ID_SIZE: Final = 4  # the schema id: unsigned 32-bit, big-endian
HEADER_SIZE: Final = 1 + ID_SIZE  # the datum starts here
ID_SLICE: Final = slice(1, HEADER_SIZE)  # value[ID_SLICE]: the id's bytes, e.g. as a grouping key


class NotFramed(AgentlogError, ValueError):
    """Bytes that do not start with a Confluent frame followed by a datum."""


def is_framed(value: bytes | None) -> bool:
    """Whether ``value`` is a frame followed by at least one byte of datum."""
    return value is not None and len(value) > HEADER_SIZE and value[0] == MAGIC


def schema_id_of(value: bytes) -> int:
    """The writer schema id of a framed value. Raises NotFramed if ``value`` is not framed."""
    if not is_framed(value):
        raise NotFramed("not Confluent wire format (magic byte 0 and a 4-byte schema id expected)")
    return int.from_bytes(value[ID_SLICE], "big")


def frame_header(schema_id: int) -> bytes:
    """The frame that puts ``schema_id`` in front of a datum."""
    return MAGIC_BYTE + schema_id.to_bytes(ID_SIZE, "big")
