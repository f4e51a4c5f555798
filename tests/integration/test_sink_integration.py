"""The sink against real Kafka, the registry and chDB: every record once, resume, retry, aborts, bad bytes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from analytics.store import open_client, parse_dsn
from consumers.batch import Batch
from consumers.registry import WriterSchemas
from consumers.store_writer import StoreWriter
from runtime.config import Settings
from runtime.log.schemas.frame import HEADER_SIZE, frame_header
from runtime.log.schemas.registry import registry_client
from support.sink import (
    EventLog,
    InProcessSink,
    RunWriter,
    SinkProcess,
    kafka_offsets,
    make_deployment,
    query,
    read_partition,
    scalar,
    store_offsets,
    wait_for_rows,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def events4(services: Settings) -> Settings:
    return make_deployment(services, partitions=4)


def _dsn(tmp_path: Path) -> str:
    return f"chdb://{tmp_path / 'analytics'}"


def _fill(settings: Settings, runs: int, steps: int = 2) -> int:
    log = EventLog(settings)
    total = 0
    for i in range(runs):
        total += len(log.append(RunWriter(f"run-{uuid.uuid4().hex[:6]}-{i}").history(steps)))
    return total


def test_every_record_lands_once_with_its_kafka_coordinates(events4: Settings, tmp_path: Path) -> None:
    dsn = _dsn(tmp_path)
    log = EventLog(events4)
    for p in range(events4.partitions):
        log.claim(p)
    writer = RunWriter("run-coords")
    history = writer.history(steps=2)
    log.append(history)
    total = _fill(events4, 5) + len(history) + events4.partitions
    with InProcessSink(events4, dsn):
        wait_for_rows(dsn, events4.events_topic, total)
    assert store_offsets(dsn, events4.events_topic) == kafka_offsets(events4)
    row = (
        "SELECT type, seq, tool, idempotency_key, toUnixTimestamp64Milli(occurred_at), size > 5, fenced "
        "FROM agentlog.events WHERE run_id = 'run-coords' AND seq = 4"
    )
    scheduled = history[3]
    assert tuple(_one_row(dsn, row)) == (
        "ToolCallScheduled",
        4,
        "refund",
        scheduled.idempotency_key,
        scheduled.occurred_at,
        True,
        0,  # type: ignore[attr-defined]
    )
    assert (
        scalar(dsn, "SELECT count() FROM agentlog.events WHERE type = 'EpochClaimed'") == events4.partitions
    )


def _one_row(dsn: str, sql: str) -> list[object]:
    rows = query(dsn, sql).rows
    assert len(rows) == 1, rows
    return rows[0]


def test_a_restarted_sink_resumes_from_the_store_without_duplicates_or_gaps(
    events4: Settings, tmp_path: Path
) -> None:
    dsn = _dsn(tmp_path)
    first = _fill(events4, 6)
    with InProcessSink(events4, dsn):
        wait_for_rows(dsn, events4.events_topic, first)
    second = first + _fill(events4, 6)  # written while no sink runs
    with InProcessSink(events4, dsn) as sink:
        wait_for_rows(dsn, events4.events_topic, second)
    assert sink.stats.rows_written == second - first  # nothing re-written
    assert store_offsets(dsn, events4.events_topic) == kafka_offsets(events4)


def test_a_failed_batch_is_retried_until_it_lands(events4: Settings, tmp_path: Path) -> None:
    dsn = _dsn(tmp_path)
    first = _fill(events4, 2)
    with InProcessSink(events4, dsn, retry_backoff=0.05) as sink:
        wait_for_rows(dsn, events4.events_topic, first)
        # Break the store under the running sink: its stage table disappears.
        vandal = open_client(parse_dsn(dsn))
        try:
            stages = [
                r[0]
                for r in vandal.query(
                    "SELECT name FROM system.tables WHERE database = 'agentlog' AND name LIKE '\\_stage%'"
                ).result_rows
            ]
            assert stages
            for name in stages:
                vandal.command(f"DROP TABLE agentlog.{name}")
        finally:
            vandal.close()
        total = first + _fill(events4, 3)
        wait_for_rows(dsn, events4.events_topic, total)
    assert sink.stats.retries >= 1
    assert store_offsets(dsn, events4.events_topic) == kafka_offsets(events4)


def test_a_retried_insert_of_the_same_batch_is_dropped_by_its_token(
    events4: Settings, tmp_path: Path
) -> None:
    _fill(events4, 3)
    batch = Batch()
    next_offsets: dict[int, int] = {}
    for p in range(events4.partitions):
        for message in read_partition(events4, p):
            batch.add(p, int(message.offset() or 0), message.key(), message.value())
            next_offsets[p] = int(message.offset() or 0) + 1
    batch.seal(next_offsets)
    client = open_client(parse_dsn(_dsn(tmp_path)))
    try:
        writer = StoreWriter(client, events4.events_topic, WriterSchemas(registry_client(events4)))
        writer.prepare()
        token = batch.token(events4.events_topic)
        writer.write(batch, token)
        writer.write(batch, token)  # the client saw an error, but the first insert had landed
        count = client.query("SELECT count(), uniqExact(partition, offset) FROM agentlog.events").result_rows[
            0
        ]
        assert count == (batch.count, batch.count)
        writer.write(batch, "another-token")  # what the token prevents
        assert client.query("SELECT count() FROM agentlog.events").result_rows[0][0] == 2 * batch.count
    finally:
        client.close()


def _transactional(settings: Settings, log: EventLog, run_id: str, commit: bool) -> int:
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "transactional.id": f"test-{uuid.uuid4().hex[:8]}",
            "partitioner": "murmur2_random",
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    records = RunWriter(run_id).history(1)
    for record in records:
        producer.produce(settings.events_topic, key=run_id.encode(), value=log.serde.encode(record))
    assert producer.flush(30) == 0  # on the broker before the abort; librdkafka drops unsent records on abort
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    return len(records)


@pytest.mark.parametrize("driver", ["direct", "faust"])
def test_records_of_an_aborted_transaction_never_land(events4: Settings, tmp_path: Path, driver: str) -> None:
    dsn = _dsn(tmp_path)
    log = EventLog(events4)
    committed = _transactional(events4, log, "run-committed", commit=True)
    _transactional(events4, log, "run-aborted", commit=False)
    plain = _fill(events4, 2)
    _transactional(events4, log, "run-aborted-2", commit=False)
    total = committed + plain
    if driver == "direct":
        with InProcessSink(events4, dsn):
            wait_for_rows(dsn, events4.events_topic, total)
    else:
        sink = SinkProcess(events4, dsn, tmp_path / "sink.log", "faust")
        try:
            wait_for_rows(dsn, events4.events_topic, total, proc=sink.proc)
        finally:
            assert sink.stop() == 0, sink.log_tail()
    assert scalar(dsn, "SELECT count() FROM agentlog.events WHERE run_id LIKE 'run-aborted%'") == 0
    assert scalar(dsn, "SELECT count() FROM agentlog.events WHERE run_id = 'run-committed'") == committed
    assert store_offsets(dsn, events4.events_topic) == kafka_offsets(events4)


def test_undecodable_records_land_flagged_and_never_stall_the_partition(
    events4: Settings, tmp_path: Path
) -> None:
    dsn = _dsn(tmp_path)
    log = EventLog(events4)
    writer = RunWriter("run-bad-bytes")
    p = log.partition(writer.run_id)
    good = log.serde.encode(writer.started())
    log.append_raw(good, p, b"run-bad-bytes")
    log.append_raw(b"plain text, not avro", p, b"run-bad-bytes")
    log.append_raw(frame_header(0x7FFFFFF0) + good[HEADER_SIZE:], p, b"run-bad-bytes")  # unknown schema id
    log.append_raw(good[:12], p, b"run-bad-bytes")  # a datum cut short
    log.append_raw(None, p, b"run-bad-bytes")  # a tombstone
    after = log.serde.encode(writer.completed())
    log.append_raw(after, p, b"run-bad-bytes")
    with InProcessSink(events4, dsn) as sink:
        wait_for_rows(dsn, events4.events_topic, 6)
    assert sink.stats.undecodable == 4
    rows = query(
        dsn,
        "SELECT type, decode_error != '', run_id, length(raw_value) FROM agentlog.events ORDER BY offset",
    ).rows
    assert [r[0] for r in rows] == ["RunStarted", "", "", "", "", "RunCompleted"]
    assert [r[1] for r in rows] == [False, True, True, True, True, False]
    assert {r[2] for r in rows} == {"run-bad-bytes"}  # the key says whose record it was
    reasons = [
        r[0]
        for r in query(dsn, "SELECT decode_error FROM agentlog.events WHERE type = '' ORDER BY offset").rows
    ]
    assert "not Confluent wire format" in reasons[0]
    assert "not an Avro record schema in the registry" in reasons[1]
    assert "cannot decode with writer schema" in reasons[2]
    assert "tombstone" in reasons[3]
