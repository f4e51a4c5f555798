"""A batch of raw Kafka records on their way to ClickHouse, grouped by writer schema id.

Nothing is decoded here. Each record is filed under the 4-byte schema id of its frame and
re-framed on the spot as a *staged datum* (see ``consumers.columns``): its partition, offset and
size as Avro varints, then the Kafka value untouched. Doing it here, on the consuming thread,
keeps it off the writer thread, whose time goes to ClickHouse.

Records that are not Confluent-framed Avro are set aside as undecodable -- they still land
(flagged, with their bytes), so they never stall a partition and rows still equal records.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from .avro_wire import zigzag

# (partition, offset, key, value)
RawRecord = tuple[int, int, bytes | None, bytes]

_SMALL_LIMIT = 16384
_SMALL = tuple(zigzag(n) for n in range(_SMALL_LIMIT))  # partitions and value sizes are small


def staged_parts(partition: int, offset: int, value: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """The pieces of one staged datum: partition, offset, size (Avro varints), then the value."""
    size = len(value)
    return (
        _SMALL[partition] if partition < _SMALL_LIMIT else zigzag(partition),
        zigzag(offset),
        _SMALL[size] if size < _SMALL_LIMIT else zigzag(size),
        value,
    )


def staged_body(records: Iterable[RawRecord]) -> bytes:
    """The staged datums of ``records``, back to back."""
    return b"".join(part for p, o, _k, v in records for part in staged_parts(p, o, v))


@dataclass
class Group:
    """The records of one writer schema in a batch, and their staged datums so far."""

    records: list[RawRecord] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)

    def body(self) -> bytes:
        return b"".join(self.parts)


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

    groups: dict[bytes, Group] = field(default_factory=dict)
    undecodable: list[Undecodable] = field(default_factory=list)
    first: dict[int, int] = field(default_factory=dict)  # partition -> first offset in the batch
    last: dict[int, int] = field(default_factory=dict)  # set when the batch is sealed
    count: int = 0
    size: int = 0
    created: float = field(default_factory=time.monotonic)

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        """File one record (the sink's hot path: about a microsecond)."""
        if partition not in self.first:
            self.first[partition] = offset
        self.count += 1
        if value is not None and len(value) > 5 and value[0] == 0:
            size = len(value)
            self.size += size
            sid = value[1:5]
            group = self.groups.get(sid)
            if group is None:
                group = self.groups[sid] = Group()
            group.records.append((partition, offset, key, value))
            group.parts.extend(
                (
                    _SMALL[partition] if partition < _SMALL_LIMIT else zigzag(partition),
                    zigzag(offset),
                    _SMALL[size] if size < _SMALL_LIMIT else zigzag(size),
                    value,
                )
            )
        else:
            self.size += len(value) if value else 0
            reason = (
                "empty value (tombstone)"
                if not value
                else "not Confluent wire format (magic byte 0 and a schema id expected)"
            )
            self.undecodable.append(Undecodable(partition, offset, key, value, -1, reason))

    def seal(self, next_offsets: dict[int, int]) -> None:
        """Fix the last offset per partition (the records accepted up to now)."""
        self.last = {p: next_offsets[p] - 1 for p in self.first}

    def token(self, topic: str) -> str:
        """A deduplication token that names exactly this batch's records: a retried insert of the
        same batch is dropped by ClickHouse instead of landing twice."""
        spans = ";".join(f"{p}:{self.first[p]}-{self.last[p]}" for p in sorted(self.first))
        return hashlib.sha256(f"{topic}|{spans}|{self.count}".encode()).hexdigest()[:40]
