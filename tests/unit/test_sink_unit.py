"""Pure logic of the sink: Avro framing, column planning, batches, the core's backpressure."""

from __future__ import annotations

import gc
import inspect
import io
import json
import re
import struct
import threading
import time

import fastavro
import pytest

from analytics.migrations import MIGRATIONS_LIST
from analytics.tables import ENVELOPE_COLUMNS, SINK_COLUMNS
from consumers import gctune, rowbinary, run_direct, run_sink
from consumers.avro_wire import container, read_zigzag, zigzag
from consumers.batch import Batch, staged_body
from consumers.columns import STAGED_FIELDS, normalize_type, plan_columns
from consumers.core import BackpressureError, SinkConfig, SinkCore, SinkWriteError
from consumers.store_writer import SinkState, WriteStats
from runtime.errors import TerminalError
from runtime.log.schemas.catalog import load_catalog

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value", [0, 1, -1, 63, -64, 64, 127, 128, 300, 2**31 - 1, -(2**31), 2**62, -(2**63)]
)
def test_zigzag_matches_avro_long_encoding(value: int) -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema({"type": "long"}), value)
    assert zigzag(value) == out.getvalue()
    assert read_zigzag(zigzag(value), 0) == (value, len(out.getvalue()))


def test_a_staged_container_decodes_as_metadata_followed_by_the_writer_record() -> None:
    writer = {
        "type": "record",
        "name": "Thing",
        "namespace": "x.y",
        "fields": [
            {"name": "run_id", "type": "string"},
            {"name": "partition", "type": "int"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "inner",
                "type": {"type": "record", "name": "Inner", "fields": [{"name": "q", "type": "int"}]},
            },
        ],
    }
    datum = io.BytesIO()
    fastavro.schemaless_writer(
        datum,
        fastavro.parse_schema(writer),
        {"run_id": "r1", "partition": 7, "note": "hi", "inner": {"q": 3}},
    )
    value = b"\x00\x00\x00\x00\x2a" + datum.getvalue()
    plan = plan_columns(42, writer, {})
    batch = Batch()
    batch.add(3, 1234, b"k", value)
    body = batch.groups[b"\x00\x00\x00\x2a"].body()
    head = struct.pack("<iqi", 3, 1234, len(value))
    assert body == staged_body([(3, 1234, b"k", value)]) == head + zigzag(1) + b"k" + value
    assert list(batch.groups[b"\x00\x00\x00\x2a"].records()) == [(3, 1234, b"k", value)]
    rows = list(fastavro.reader(io.BytesIO(container(plan.staged_schema, body, 1))))
    assert rows == [
        {
            "_sink_meta": head,
            "run_id": b"k",  # the Kafka key, not the value's own run_id field
            "_confluent_frame": b"\x00\x00\x00\x00\x2a",
            "_unstored_0": "r1",
            "record_partition": 7,
            "note": "hi",
            "_unstored_3": {"q": 3},
        }
    ]
    assert [f.column for f in plan.fields] == [None, "record_partition", "note", None]
    assert "_unstored_3" not in plan.insert_columns and "_confluent_frame" in plan.insert_columns
    assert plan.insert_columns.count("run_id") == 1


@pytest.mark.parametrize("key", [None, b"", b"r" * 63, b"r" * 64, b"r" * 300])
def test_keys_of_any_length_round_trip_through_the_staged_datum(key: bytes | None) -> None:
    value = b"\x00\x00\x00\x00\x01v"
    batch = Batch()
    batch.add(5, 2**40, key, value)
    group = batch.groups[b"\x00\x00\x00\x01"]
    assert group.body() == staged_body([(5, 2**40, key, value)])
    assert list(group.records()) == [(5, 2**40, key or None, value)]
    staged = fastavro.parse_schema({"type": "record", "name": "S", "fields": list(STAGED_FIELDS)})
    reader = io.BytesIO(group.body())
    decoded = fastavro.schemaless_reader(reader, staged, None)
    assert decoded == {"_sink_meta": struct.pack("<iqi", 5, 2**40, len(value)), "run_id": key or b""}
    assert reader.read() == value  # the value follows, untouched


def test_columns_reuse_matching_types_and_rename_on_conflict() -> None:
    writer = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "attempt", "type": "string"},
            {"name": "tool", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "either", "type": ["null", "int", "string"]},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    existing = {"attempt": "Nullable(Int32)", "tool": "LowCardinality(Nullable(String))"}
    plan = plan_columns(1, writer, existing)
    by_field = {f.field: (f.column, f.type) for f in plan.fields}
    assert by_field["attempt"] == ("attempt__nullable_string", "Nullable(String)")
    assert by_field["tool"] == ("tool", "Nullable(String)")  # LowCardinality is a storage hint
    assert by_field["tags"] == ("tags", "Array(String)")
    assert by_field["either"] == (None, None)  # a union of two types has no column
    assert by_field["at"] == ("at", "Nullable(DateTime64(3, 'UTC'))")
    assert plan.new_columns(existing) == [
        ("attempt__nullable_string", "Nullable(String)"),
        ("tags", "Array(String)"),
        ("at", "Nullable(DateTime64(3, 'UTC'))"),
    ]


def test_normalize_type_ignores_low_cardinality_and_spaces() -> None:
    assert normalize_type("LowCardinality(Nullable(String))") == "Nullable(String)"
    assert normalize_type("Map(String, Int64)") == normalize_type("Map(String,Int64)")


_ADD_COLUMN = "ADD COLUMN IF NOT EXISTS "


def _shipped_event_columns() -> dict[str, str]:
    """Column -> type of agentlog.events as the released migrations' text creates it: the CREATE
    TABLE's one column a line, and each ALTER's ADD COLUMNs."""
    columns: dict[str, str] = {}
    for migration in MIGRATIONS_LIST:
        for statement in migration.statements:
            if statement.startswith("CREATE TABLE IF NOT EXISTS agentlog.events ("):
                body = statement.split("(\n", 1)[1].split("\n)\n", 1)[0]
                columns.update(re.findall(r"^    `(\w+)` (.+?),?$", body, re.MULTILINE))
            elif statement.startswith(f"ALTER TABLE agentlog.events {_ADD_COLUMN}"):
                for added in statement.removeprefix(f"ALTER TABLE agentlog.events {_ADD_COLUMN}").split(
                    f", {_ADD_COLUMN}"
                ):
                    column = re.fullmatch(r"`(\w+)` (.+)", added)
                    assert column is not None, added
                    columns[column.group(1)] = column.group(2)
    return columns


def test_the_shipped_columns_are_read_from_the_migrations() -> None:
    shipped = _shipped_event_columns()
    assert dict((*SINK_COLUMNS, *ENVELOPE_COLUMNS)).items() <= shipped.items()
    assert shipped["active_runs"] == "Map(String, Int64)"  # migration 1
    assert shipped["fire_at"] == "Nullable(DateTime64(3, 'UTC'))"
    assert shipped["new_messages"] == "Array(String)"  # migration 10
    assert shipped["chain"] == "Nullable(String)"  # migration 14
    assert shipped["budget"] == "Nullable(String)"  # migration 15
    assert shipped["retry_at"] == "Nullable(DateTime64(3, 'UTC'))"  # migration 17
    assert shipped["waiting_runs"] == shipped["waiting_timers"] == "Map(String, Int64)"  # migration 18
    assert shipped["child_of"] == shipped["child_run_id"] == "Nullable(String)"  # migration 19
    assert shipped["beat_at"] == "Nullable(DateTime64(3, 'UTC'))"  # migration 20
    assert shipped["deadline"] == "Nullable(Int64)"  # migration 21
    assert shipped["commands_handled"] == "Array(Int64)"  # migration 22
    assert shipped["signature"] == "Nullable(String)"  # migration 23
    assert shipped["whatif"] == shipped["whatif_change"] == "Nullable(String)"  # migration 24
    # sink, envelope, the fields of 1, 5, 6, 8, 10, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24
    assert len(shipped) == 10 + 6 + 38 + 2 + 3 + 4 + 11 + 1 + 1 + 1 + 5 + 1 + 2 + 6 + 2 + 1 + 1 + 1 + 2


def test_every_released_event_schema_fits_the_shipped_columns() -> None:
    """Released schemas need no derived migration: their fields are columns the migrations create."""
    existing = _shipped_event_columns()
    for name, schema in load_catalog().items():
        if schema.role != "events":
            continue
        plan = plan_columns(1, schema.parsed, existing)
        assert plan.new_columns(existing) == [], name
        # every field has a column, except a run_id field: the run id is the Kafka key
        assert all(f.column is not None for f in plan.fields if f.field != "run_id"), name


def test_migrations_have_unique_increasing_versions() -> None:
    versions = [m.version for m in MIGRATIONS_LIST]
    assert versions == sorted(set(versions))


def test_batch_sorts_records_by_schema_id_and_sets_aside_the_undecodable() -> None:
    batch = Batch()
    batch.add(0, 10, b"r1", b"\x00\x00\x00\x00\x07payload")
    batch.add(0, 11, b"r1", b"not avro")
    batch.add(1, 5, None, None)
    batch.add(0, 12, b"r1", b"\x00\x00\x00\x00\x07more")
    assert list(batch.groups) == [b"\x00\x00\x00\x07"]
    assert [r[1] for r in batch.groups[b"\x00\x00\x00\x07"].records()] == [10, 12]
    assert [(u.offset, u.reason.split(" ")[0]) for u in batch.undecodable] == [(11, "not"), (5, "empty")]
    assert batch.count == 4
    batch.seal({0: 13, 1: 6})
    assert batch.last == {0: 12, 1: 5}
    again = Batch(first={1: 5, 0: 10}, last={0: 12, 1: 5}, count=4)
    assert again.token("t") == batch.token("t")
    assert Batch(first={0: 10}, last={0: 12}, count=3).token("t") != batch.token("t")


def test_sink_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="batch_rows"):
        SinkConfig(batch_rows=0)
    with pytest.raises(ValueError, match="flush_interval"):
        SinkConfig(flush_interval=0)


class _StuckWriter:
    """A store that takes forever to write: the core must apply backpressure, not buffer."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.writes = 0

    def prepare(self) -> SinkState:
        return SinkState({}, {})

    def write(self, batch: Batch, token: str) -> WriteStats:
        self.release.wait(30)
        self.writes += 1
        return WriteStats(batch.count, 0)

    def reset_stage(self) -> None:
        return None


def test_a_store_that_cannot_keep_up_raises_backpressure_instead_of_buffering() -> None:
    writer = _StuckWriter()
    core = SinkCore(writer, "t", SinkConfig(batch_rows=10, max_pending=1, backpressure_timeout=0.3))
    core.start()
    try:
        started = time.monotonic()
        with pytest.raises(BackpressureError, match="has not accepted a batch"):
            for offset in range(1000):
                core.add(0, offset, b"k", b"\x00\x00\x00\x00\x01v")
        assert time.monotonic() - started < 5
        # one batch being written + one queued + the open one: memory is bounded by three batches
        assert offset < 40
    finally:
        writer.release.set()
        core.close(flush=False)
    assert writer.writes == 2


class _FailingWriter(_StuckWriter):
    def __init__(self, failures: int, error: Exception) -> None:
        super().__init__()
        self.failures = failures
        self.error = error
        self.resets = 0

    def write(self, batch: Batch, token: str) -> WriteStats:
        self.writes += 1
        if self.writes <= self.failures:
            raise self.error
        return WriteStats(batch.count, 0)

    def reset_stage(self) -> None:
        self.resets += 1


def test_a_failed_batch_is_retried_then_stops_the_sink_when_it_keeps_failing() -> None:
    flaky = _FailingWriter(2, OSError("connection reset"))
    core = SinkCore(flaky, "t", SinkConfig(batch_rows=5, retry_backoff=0.01))
    core.start()
    for offset in range(5):
        core.add(0, offset, None, b"\x00\x00\x00\x00\x01v")
    core.close()
    assert (flaky.writes, flaky.resets, core.stats.retries, core.stats.rows_written) == (3, 2, 2, 5)
    assert core.durable_offsets() == {0: 5}

    broken = _FailingWriter(100, OSError("gone"))
    core = SinkCore(broken, "t", SinkConfig(batch_rows=5, retry_attempts=3, retry_backoff=0.01))
    core.start()
    for offset in range(5):
        core.add(0, offset, None, b"\x00\x00\x00\x00\x01v")
    with pytest.raises(SinkWriteError, match="failed 3 times"):
        core.flush()
    core.close()
    assert core.durable_offsets() == {}

    terminal = _FailingWriter(100, TerminalError("bad"))
    core = SinkCore(terminal, "t", SinkConfig(batch_rows=1, retry_backoff=0.01))
    core.start()
    core.add(0, 0, None, b"\x00\x00\x00\x00\x01v")
    with pytest.raises(SinkWriteError, match="bad"):
        core.flush()
    core.close()
    assert terminal.writes == 1  # terminal errors are not retried


def test_records_below_the_stored_position_are_skipped() -> None:
    class Resumed(_FailingWriter):
        def prepare(self) -> SinkState:
            return SinkState({0: 100}, {0: 3})

    writer = Resumed(0, OSError())
    core = SinkCore(writer, "t", SinkConfig(batch_rows=1000))
    assert core.start() == {0: 100}
    for offset in range(95, 105):
        core.add(0, offset, None, b"\x00\x00\x00\x00\x01v")
    core.close()
    assert core.stats.skipped == 5
    assert core.stats.rows_written == 5
    assert core.durable_offsets() == {0: 105}


def test_staged_schema_is_valid_avro_for_every_released_schema() -> None:
    for schema in load_catalog().values():
        plan = plan_columns(1, schema.parsed, {})
        fastavro.parse_schema(json.loads(json.dumps(plan.staged_schema)))


@pytest.mark.parametrize(
    ("value", "encoded"), [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")]
)
def test_rowbinary_lengths_are_unsigned_leb128(value: int, encoded: bytes) -> None:
    assert rowbinary.uleb128(value) == encoded
    assert rowbinary.string(b"x" * value) == encoded + b"x" * value


class _Message:
    """The five accessors of confluent-kafka's Message that ``Batch.fill`` reads."""

    def __init__(
        self, partition: int, offset: int, key: bytes | None, value: bytes | None, err: str = ""
    ) -> None:
        self._record = (partition, offset, key, value)
        self._error = err or None

    def error(self) -> str | None:
        return self._error

    def partition(self) -> int:
        return self._record[0]

    def offset(self) -> int:
        return self._record[1]

    def key(self) -> bytes | None:
        return self._record[2]

    def value(self) -> bytes | None:
        return self._record[3]


def test_fill_files_records_exactly_as_add_does() -> None:
    records = [
        (0, 10, b"r1", b"\x00\x00\x00\x00\x07payload"),
        (0, 11, b"r1", b"not avro"),
        (1, 5, None, None),
        (1, 6, b"k" * 70, b"\x00\x00\x00\x00\x08other"),
        (0, 12, b"", b"\x00\x00\x00\x00\x07more"),
    ]
    one_by_one = Batch()
    for record in records:
        one_by_one.add(*record)
    filled = Batch()
    next_offsets: dict[int, int] = {}
    assert filled.fill([_Message(*r) for r in records], 0, next_offsets, 100, 10**6) == (5, 0)
    assert next_offsets == {0: 13, 1: 7}
    assert (filled.count, filled.size, filled.first) == (one_by_one.count, one_by_one.size, one_by_one.first)
    assert {s: g.parts for s, g in filled.groups.items()} == {
        s: g.parts for s, g in one_by_one.groups.items()
    }
    assert filled.undecodable == one_by_one.undecodable


def test_fill_skips_stored_records_and_stops_when_full_or_at_an_error() -> None:
    value = b"\x00\x00\x00\x00\x01v"
    messages = [_Message(0, o, b"r", value) for o in range(10)]
    batch = Batch()
    next_offsets = {0: 3}
    assert batch.fill(messages, 0, next_offsets, 4, 10**6) == (7, 3)  # 3 skipped, 4 taken: full
    assert (batch.count, batch.first, next_offsets) == (4, {0: 3}, {0: 7})
    with_error = [*messages[7:8], _Message(0, 0, None, None, err="eof"), *messages[8:]]
    rest = Batch()
    assert rest.fill(with_error, 0, next_offsets, 100, 10**6) == (1, 0)  # stops at the error
    assert rest.fill(with_error, 2, next_offsets, 100, 10**6) == (4, 0)
    assert [r[1] for r in rest.groups[b"\x00\x00\x00\x01"].records()] == [7, 8, 9]


def test_add_messages_hands_off_full_batches() -> None:
    writer = _FailingWriter(0, OSError())
    core = SinkCore(writer, "t", SinkConfig(batch_rows=4))
    core.start()
    value = b"\x00\x00\x00\x00\x01v"
    assert core.add_messages([_Message(0, o, b"r", value) for o in range(10)]) == 10
    core.close()
    assert (writer.writes, core.stats.rows_written, core.durable_offsets()) == (3, 10, {0: 10})


def test_bulk_collection_nests_and_restores_the_collector() -> None:
    before = gc.get_threshold()
    with gctune.bulk_collection():
        assert gc.get_threshold()[0] == gctune.BULK_THRESHOLD and gc.get_freeze_count() > 0
        with gctune.bulk_collection():
            pass
        assert gc.get_threshold()[0] == gctune.BULK_THRESHOLD  # the inner exit keeps the outer's
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_only_the_sink_entry_point_tunes_the_collector() -> None:
    """The collector is the interpreter's: a program calling the driver keeps its settings unless
    it asks; ``run_sink`` (``agentlog sink``) asks."""
    assert inspect.signature(run_direct).parameters["tune_gc"].default is False
    assert inspect.signature(run_sink).parameters["tune_gc"].default is True
