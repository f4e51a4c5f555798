"""The sink's store port (``consumers.core.BatchWriter``), one suite run against every implementation.

What the sink's core relies on (consumers.core's checkpoint order): ``prepare`` says where each
partition stands -- the next offset and the fencing watermark -- from what the store holds, so a
restarted sink resumes exactly; ``write`` lands a batch, and the same batch written again under
its token lands once (a retry after an ambiguous failure); a record that does not decode still
lands, so rows equal records and nothing stalls; a record below its partition's watermark --
from batches before, or from before a restart -- is stored fenced.

Each backend's class differs only in how it opens a writer and reads the rows back: in memory
(tests/support/memory_store.py, for the sink's unit tests) and ClickHouse
(``consumers.store_writer.StoreWriter`` on chDB behind clickhouse-connect, schemas from the
registry, as the sink runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client as ClickHouse

from analytics.store import open_client, parse_dsn
from consumers.batch import Batch
from consumers.core import BatchWriter
from consumers.registry import WriterSchemas
from consumers.store_writer import SinkState, StoreWriter, WriteStats
from runtime.config import Settings
from runtime.log.records import events as ev
from runtime.log.schemas.registry import registry_client
from runtime.log.schemas.serde import Serde
from support.memory_store import MemoryBatchWriter, MemoryStore
from support.sink import RunWriter

NOT_AVRO = b"a record some other producer wrote"


class BatchWriterContract:
    """Subclassed once per implementation; ``topic`` is the events topic its batches come from."""

    topic: str
    serde: Serde

    def open_writer(self) -> BatchWriter:
        """A writer on the store, as a (re)started sink opens it."""
        raise NotImplementedError

    def stored(self) -> list[tuple[int, int, bool]]:
        """(partition, offset, fenced) of every row the store holds for ``topic``, in that order."""
        raise NotImplementedError

    def batch(self, records: list[tuple[int, int, ev.Event | bytes]]) -> Batch:
        """A sealed batch of (partition, offset, event or raw value), as the core hands one over."""
        batch = Batch()
        next_offsets: dict[int, int] = {}
        for partition, offset, record in records:
            if isinstance(record, bytes):
                batch.add(partition, offset, None, record)
            else:
                batch.add(partition, offset, record.run_id.encode(), self.serde.encode(record))
            next_offsets[partition] = offset + 1
        batch.seal(next_offsets)
        return batch

    def write(self, writer: BatchWriter, records: list[tuple[int, int, ev.Event | bytes]]) -> WriteStats:
        batch = self.batch(records)
        return writer.write(batch, batch.token(self.topic))

    # -- tests ----------------------------------------------------------------------------------
    def test_a_store_that_holds_nothing_says_so(self) -> None:
        assert self.open_writer().prepare() == SinkState({}, {})

    def test_a_written_batch_is_stored_and_a_restarted_writer_resumes_after_it(self) -> None:
        writer = self.open_writer()
        writer.prepare()
        run_a, run_b = RunWriter("run-a").history(steps=1), RunWriter("run-b").history(steps=1)
        records: list[tuple[int, int, ev.Event | bytes]] = [
            *((0, 10 + i, e) for i, e in enumerate(run_a)),
            *((2, i, e) for i, e in enumerate(run_b)),
        ]
        assert self.write(writer, records) == WriteStats(len(records), 0)
        assert self.stored() == sorted((p, o, False) for p, o, _ in records)
        resumed = self.open_writer().prepare()
        assert resumed.next_offsets == {0: 10 + len(run_a), 2: len(run_b)}

    def test_a_batch_written_again_under_its_token_lands_once(self) -> None:
        writer = self.open_writer()
        writer.prepare()
        run = RunWriter("run-retried").history(steps=1)
        batch = self.batch([(1, i, e) for i, e in enumerate(run)])
        writer.write(batch, batch.token(self.topic))
        writer.reset_stage()  # the retry path: the core resets the stage before writing again
        assert writer.write(batch, batch.token(self.topic)) == WriteStats(len(run), 0)
        again = self.open_writer()  # and a restarted sink that read the same records again
        again.prepare()
        again.write(batch, batch.token(self.topic))
        assert self.stored() == [(1, i, False) for i in range(len(run))]

    def test_a_record_that_does_not_decode_lands_and_counts_for_the_position(self) -> None:
        writer = self.open_writer()
        writer.prepare()
        run = RunWriter("run-beside").history(steps=1)
        records: list[tuple[int, int, ev.Event | bytes]] = [(0, 0, run[0]), (0, 1, NOT_AVRO), (0, 2, run[1])]
        assert self.write(writer, records) == WriteStats(3, 1)
        assert [(p, o) for p, o, _ in self.stored()] == [(0, 0), (0, 1), (0, 2)]
        assert self.open_writer().prepare().next_offsets == {0: 3}

    def test_records_below_the_watermark_are_fenced_across_batches_and_restarts(self) -> None:
        zombie, owner = RunWriter("run-fenced", epoch=0, worker="w1"), RunWriter("run-owned", worker="w2")
        writer = self.open_writer()
        writer.prepare()
        first: list[tuple[int, int, ev.Event | bytes]] = [
            (0, 0, zombie.started()),
            (0, 1, ev.EpochClaimed(run_id="", partition=0, worker="w2", occurred_at=1)),  # epoch 1
        ]
        self.write(writer, first)
        owner.epoch = 1
        second: list[tuple[int, int, ev.Event | bytes]] = [
            (0, 2, zombie.model_call(1)[0]),  # the old owner, still writing: below the watermark
            (0, 3, owner.started()),
        ]
        self.write(writer, second)
        restarted = self.open_writer()
        assert restarted.prepare().watermarks == {0: 1}
        third: list[tuple[int, int, ev.Event | bytes]] = [(0, 4, zombie.completed())]
        self.write(restarted, third)  # the watermark came back from the store
        assert [fenced for _, _, fenced in self.stored()] == [False, False, True, False, True]


@pytest.mark.unit
class TestMemoryBatchWriter(BatchWriterContract):
    topic = "contract.events"

    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        self.memory = MemoryStore()
        self.serde = Serde.offline(Settings(partitions=3, events_topic=self.topic))

    def open_writer(self) -> BatchWriter:
        return MemoryBatchWriter(self.memory, self.topic, self.serde)

    def stored(self) -> list[tuple[int, int, bool]]:
        return sorted((p, o, row.fenced) for p, o, row in self.memory.rows.get(self.topic, []))


@pytest.mark.integration
class TestClickHouseStoreWriter(BatchWriterContract):
    @pytest.fixture(autouse=True)
    def _store(self, deployment: Settings, tmp_path: Path) -> Iterator[None]:
        self.topic = deployment.events_topic
        self.serde = Serde(deployment)
        self.schemas = WriterSchemas(registry_client(deployment))
        self.client: ClickHouse = open_client(parse_dsn(f"chdb://{tmp_path / 'store'}"))
        try:
            yield
        finally:
            self.client.close()

    def open_writer(self) -> BatchWriter:
        return StoreWriter(self.client, self.topic, self.schemas)

    def stored(self) -> list[tuple[int, int, bool]]:
        rows = self.client.query(
            "SELECT partition, offset, fenced FROM agentlog.events WHERE topic = {topic:String} "
            "ORDER BY partition, offset",
            parameters={"topic": self.topic},
        ).result_rows
        return [(int(p), int(o), bool(f)) for p, o, f in rows]
