"""A batch of raw Kafka records on their way to ClickHouse, grouped by writer schema id.

Nothing is decoded here: the hot path only sorts each record by the 4-byte schema id in its
frame, so a batch costs one tuple per record. Records that are not Confluent-framed Avro are
set aside as undecodable -- they still land (flagged, with their bytes) so they never stall a
partition and the row count still equals the record count.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

# (partition, offset, key, value)
RawRecord = tuple[int, int, bytes | None, bytes]


@dataclass(frozen=True)
class Undecodable:
    """A record ClickHouse cannot decode, kept with the reason and its bytes."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    schema_id: int
    reason: str


@dataclass
class Batch:
    """Records accepted since the last hand-off."""

    groups: dict[bytes, list[RawRecord]] = field(default_factory=dict)
    undecodable: list[Undecodable] = field(default_factory=list)
    first: dict[int, int] = field(default_factory=dict)  # partition -> first offset in the batch
    last: dict[int, int] = field(default_factory=dict)  # set when the batch is sealed
    count: int = 0
    size: int = 0
    created: float = field(default_factory=time.monotonic)

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        if partition not in self.first:
            self.first[partition] = offset
        self.count += 1
        if value is not None and len(value) > 5 and value[0] == 0:
            self.size += len(value)
            sid = value[1:5]
            group = self.groups.get(sid)
            if group is None:
                group = self.groups[sid] = []
            group.append((partition, offset, key, value))
        else:
            self.size += len(value) if value else 0
            reason = "empty value (tombstone)" if not value else "not Confluent wire format (magic byte 0 and a schema id expected)"
            self.undecodable.append(Undecodable(partition, offset, key, value, -1, reason))

    def seal(self, next_offsets: dict[int, int]) -> None:
        """Fix the last offset per partition (the records accepted up to now)."""
        self.last = {p: next_offsets[p] - 1 for p in self.first}

    def token(self, topic: str) -> str:
        """A deduplication token that names exactly this batch's records: a retried insert of the
        same batch is dropped by ClickHouse instead of landing twice."""
        spans = ";".join(f"{p}:{self.first[p]}-{self.last[p]}" for p in sorted(self.first))
        return hashlib.sha256(f"{topic}|{spans}|{self.count}".encode()).hexdigest()[:40]
