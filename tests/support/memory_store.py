"""The sink's store port (``consumers.core.BatchWriter``) in memory, for tests of the sink's core.

It keeps what the events table keeps of each record -- where it was read, whether it is fenced,
what it adds to its partition's watermark -- and answers ``prepare`` from those rows, as
``consumers.store_writer.StoreWriter`` answers from ClickHouse's. The contract suite
(tests/contract/test_batch_writer.py) holds the two to the same behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.batch import Batch
from consumers.store_writer import SinkState, WriteStats
from runtime.log.records.events import EpochClaimed, Event
from runtime.log.schemas.serde import Serde


@dataclass(frozen=True)
class Row:
    fenced: bool
    mark: int  # what the row adds to its partition's watermark: a claim's offset, else its epoch


@dataclass
class MemoryStore:
    """What a store holds, shared by the writers that open it (a restarted sink opens it again)."""

    rows: dict[str, list[tuple[int, int, Row]]] = field(
        default_factory=dict
    )  # topic -> (partition, offset, row)
    tokens: set[str] = field(default_factory=set)


class MemoryBatchWriter:
    """Writes batches of one topic into a ``MemoryStore``, records decoded with ``serde``."""

    def __init__(self, store: MemoryStore, topic: str, serde: Serde) -> None:
        self.store, self.topic, self.serde = store, topic, serde
        self.watermarks: dict[int, int] = {}

    def prepare(self) -> SinkState:
        next_offsets: dict[int, int] = {}
        self.watermarks = {}
        for partition, offset, row in self.store.rows.get(self.topic, []):
            next_offsets[partition] = max(next_offsets.get(partition, 0), offset + 1)
            self.watermarks[partition] = max(self.watermarks.get(partition, -1), row.mark)
        return SinkState(next_offsets, dict(self.watermarks))

    def write(self, batch: Batch, token: str) -> WriteStats:
        records = [r for group in batch.groups.values() for r in group.records()]
        records += [(u.partition, u.offset, u.key, u.value or b"") for u in batch.undecodable]
        decoded = {(p, o): self._decode(v, k) for p, o, k, v in records}
        undecodable = sum(1 for event in decoded.values() if event is None)
        if token in self.store.tokens:  # a retry of a batch that landed: dropped, as the token says
            return WriteStats(batch.count, undecodable)
        rows = self.store.rows.setdefault(self.topic, [])
        watermarks = dict(self.watermarks)
        for (partition, offset), event in sorted(decoded.items()):
            before = watermarks.get(partition, -1)
            if event is None:
                row = Row(fenced=False, mark=-1)  # an undecodable record lands, and fences nothing
            elif isinstance(event, EpochClaimed):
                row = Row(fenced=False, mark=offset)
            else:
                row = Row(fenced=event.epoch < before, mark=event.epoch)
            rows.append((partition, offset, row))
            watermarks[partition] = max(before, row.mark)
        self.store.tokens.add(token)
        self.watermarks = watermarks  # only once the batch is in
        return WriteStats(batch.count, undecodable)

    def reset_stage(self) -> None:
        return None  # nothing is staged between a write's steps

    def _decode(self, value: bytes, key: bytes | None) -> Event | None:
        try:
            event = self.serde.decode(value, key)
        except Exception:  # any record the serde cannot read is stored as undecodable
            return None
        return event if isinstance(event, Event) else None
