"""The run's hash chain (runtime.log.records.chain) on real encoded records."""

from __future__ import annotations

import pytest

from runtime.config import Settings
from runtime.log.records.chain import START, ChainKey, UnsealableRecord, first_break, link_of, seal
from runtime.log.records.events import RunStarted, SignalSent, ToolCallCompleted, ToolCallScheduled
from runtime.log.schemas.catalog import load_catalog
from runtime.log.schemas.serde import Serde

pytestmark = pytest.mark.unit

KEY = ChainKey(b"worker key")
RUN = "run-1"


def _sealed(serde: Serde) -> list[bytes]:
    events = [
        RunStarted(run_id=RUN, seq=1, workflow="refund", input="{}", command_offset=0),
        ToolCallScheduled(run_id=RUN, seq=2, position=1, tool="charge", args_hash="h", args="{}"),
        ToolCallCompleted(run_id=RUN, seq=3, position=1, result='"ok"'),
    ]
    values, tip = [], START
    for event in events:
        value = seal(KEY, RUN.encode(), tip, serde.encode(event))
        tip = link_of(value) or b""
        values.append(value)
    return values


@pytest.fixture
def serde() -> Serde:
    return Serde.offline(Settings())


def test_every_event_schema_ends_with_the_chain_field() -> None:
    """Sealing writes over the value's last byte: the chain must stay each event schema's last field."""
    for name, schema in load_catalog().items():
        if schema.role == "events":
            assert schema.parsed["fields"][-1]["name"] == "chain", name


def test_a_sealed_chain_verifies_and_decodes_with_its_link(serde: Serde) -> None:
    values = _sealed(serde)
    assert first_break(KEY, RUN, values) is None
    decoded = serde.decode(values[2], RUN.encode())
    assert isinstance(decoded, ToolCallCompleted) and decoded.result == '"ok"'
    assert decoded.chain == link_of(values[2]) and len(decoded.chain) == 8
    assert (
        len(values[2]) - len(serde.encode(decoded.__class__(run_id=RUN, seq=3, position=1, result='"ok"')))
        == 8
    )


def test_each_kind_of_tampering_is_named_at_its_record(serde: Serde) -> None:
    values = _sealed(serde)
    altered = values[2].replace(b'"ok"', b'"no"')
    found = first_break(KEY, RUN, [values[0], values[1], altered])
    assert found is not None and (found.index, found.kind) == (
        2,
        "added, altered or a record before it removed",
    )
    found = first_break(KEY, RUN, [values[0], values[2]])
    assert found is not None and (found.index, found.kind) == (
        1,
        "added, altered or a record before it removed",
    )
    found = first_break(KEY, RUN, [values[0], values[1], values[1]])
    assert found is not None and (found.index, found.kind) == (2, "reordered")
    found = first_break(KEY, RUN, [values[0], values[2], values[1]])
    assert found is not None and found.index == 1
    found = first_break(ChainKey(b"another key"), RUN, values)
    assert found is not None and found.index == 0
    found = first_break(KEY, "run-2", values)  # a record moved to another run
    assert found is not None and found.index == 0
    unchained = serde.encode(SignalSent(run_id=RUN, name="x", payload="1"))
    found = first_break(KEY, RUN, [*values, unchained])
    assert found is not None and (found.index, found.kind) == (3, "unchained")


def test_a_record_whose_schema_does_not_end_with_the_field_is_refused(serde: Serde) -> None:
    with pytest.raises(UnsealableRecord):
        seal(KEY, RUN.encode(), START, b"\x00\x00\x00\x00\x01\x02")
