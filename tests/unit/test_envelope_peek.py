"""An event's type and fencing epoch read from its bytes without decoding it
(runtime.log.schemas.envelope, ``Serde.peek``): what a client's result tail keeps its fence with
for every record of a run but its start and end. It must agree with a full decode on every event
type of the catalog, and step aside (None: decode it) wherever it cannot be sure."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest

from runtime.config import load_settings
from runtime.log.records.events import RECORD_TYPES, Event, ModelCallCompleted
from runtime.log.schemas.envelope import leads_with_envelope
from runtime.log.schemas.serde import Serde

pytestmark = pytest.mark.unit

_FILLERS: dict[Any, Any] = {str: "x", int: 1, float: 0.5, bool: True, bytes: b"\x01"}


def _filler(hint: Any) -> Any:
    """A value of ``hint``'s type for a required field (its first member for a union)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return _filler(typing.get_args(hint)[0])
    origin = typing.get_origin(hint) or hint
    if origin in (list, tuple):
        return origin()
    if origin is dict:
        return {}
    return _FILLERS[origin]


def an_event(cls: type[Event], **envelope: Any) -> Event:
    hints = typing.get_type_hints(cls)
    required = {
        f.name: _filler(hints[f.name])
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return cls(**{**required, **envelope})


EVENT_TYPES = sorted(name for name, cls in RECORD_TYPES.items() if issubclass(cls, Event))


@pytest.fixture(scope="module")
def serde() -> Serde:
    return Serde.offline(load_settings())


@pytest.mark.parametrize("name", EVENT_TYPES)
@pytest.mark.parametrize("epoch", [-1, 0, 63, 64, 123_456_789_012])
def test_peek_reads_the_type_and_epoch_a_decode_reads(serde: Serde, name: str, epoch: int) -> None:
    event = an_event(RECORD_TYPES[name], run_id="run-1", seq=300, epoch=epoch, worker="wörker-7" * 20)  # type: ignore[arg-type]
    data = serde.encode(event)
    decoded = serde.decode(data, b"run-1")
    assert serde.peek(data) == (name, decoded.epoch) == (name, epoch)


def test_bytes_that_end_inside_the_envelope_are_left_to_decode(serde: Serde) -> None:
    data = serde.encode(ModelCallCompleted(run_id="r", position=1, result="{}", epoch=99, worker="w" * 40))
    assert serde.peek(data) == ("ModelCallCompleted", 99)
    assert serde.peek(data[:12]) is None  # cut inside the worker's name
    assert serde.peek(data[:5]) is None  # the frame alone


def test_a_schema_id_this_serde_has_not_read_is_left_to_decode(serde: Serde) -> None:
    data = serde.encode(ModelCallCompleted(run_id="r", position=1, result="{}", epoch=5))
    unknown = data[:1] + (987_654).to_bytes(4, "big") + data[5:]
    assert serde.peek(unknown) is None
    assert serde.peek(b"not framed at all") is None


def test_only_a_schema_that_starts_with_the_envelope_is_peeked() -> None:
    envelope = [
        {"name": "seq", "type": "long"},
        {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "worker", "type": "string"},
        {"name": "epoch", "type": "long"},
    ]
    assert leads_with_envelope({"type": "record", "fields": [*envelope, {"name": "x", "type": "int"}]})
    reordered = [envelope[0], envelope[2], envelope[1], envelope[3]]
    assert not leads_with_envelope({"type": "record", "fields": reordered})
    retyped = [*envelope[:3], {"name": "epoch", "type": "int"}]
    assert not leads_with_envelope({"type": "record", "fields": retyped})
    assert not leads_with_envelope({"type": "record", "fields": envelope[:3]})
    assert not leads_with_envelope("string")
