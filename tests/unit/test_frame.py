"""The Confluent wire frame, defined once (runtime.log.schemas.frame)."""

from __future__ import annotations

import pytest

from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.datum import schema_id_of as serde_schema_id_of
from runtime.log.schemas.frame import (
    HEADER_SIZE,
    ID_SLICE,
    MAGIC,
    NotFramed,
    frame_header,
    is_framed,
    schema_id_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("schema_id", [0, 1, 255, 256, 70_000, 2**31 - 1, 2**32 - 1])
def test_a_header_reads_back_its_schema_id(schema_id: int) -> None:
    header = frame_header(schema_id)
    assert len(header) == HEADER_SIZE and header[0] == MAGIC
    assert schema_id_of(header + b"\x02") == schema_id
    assert (header + b"\x02")[ID_SLICE] == schema_id.to_bytes(4, "big")


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01\x02", b"{}"])
def test_unframed_bytes_are_refused(value: bytes) -> None:
    assert not is_framed(value)
    with pytest.raises(NotFramed):
        schema_id_of(value)
    with pytest.raises(DecodeError) as refused:
        serde_schema_id_of(value)
    assert refused.value.data == value  # the serde's error carries the bytes
