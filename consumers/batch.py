"""A batch of raw Kafka records on their way to ClickHouse, grouped by writer schema id.

Nothing is decoded here. Each record is filed under the 4-byte schema id of its frame and
re-framed on the spot as a *staged datum* (see ``consumers.columns``): a fixed 16-byte header
(partition, offset, value size; little-endian), its Kafka key (the run id) as Avro bytes, then
the Kafka value untouched. That is two list items per record, the first built by one
``struct`` call: this loop runs once per record under the GIL, and every microsecond in it is a
microsecond the whole sink waits (the Kafka consumer shares the GIL with the writer).

Records that are not Confluent-framed Avro are set aside as undecodable -- they still land
(flagged, with their bytes), so they never stall a partition and rows still equal records.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from runtime.log.schemas.frame import HEADER_SIZE, ID_SLICE, MAGIC

from .avro_wire import read_zigzag, zigzag

# A record as the sink stages it: (partition, offset, key, value).
SinkRecord = tuple[int, int, bytes | None, bytes]

META = struct.Struct("<iqi")  # partition, offset, value size: the stage's fixed header column
META_SIZE = META.size
# The header plus the key's Avro length for keys under 64 bytes (a one-byte varint: 2 * length).
_META_AND_SHORT_KEY = struct.Struct("<iqiB").pack
_SHORT_KEY = 64


def staged_head(partition: int, offset: int, key: bytes | None, size: int) -> bytes:
    """Everything of a staged datum before the Kafka value: header, then the key as Avro bytes."""
    if not key:
        return _META_AND_SHORT_KEY(partition, offset, size, 0)
    if len(key) < _SHORT_KEY:
        return _META_AND_SHORT_KEY(partition, offset, size, len(key) << 1) + key
    return META.pack(partition, offset, size) + zigzag(len(key)) + key


def staged_body(records: Iterable[SinkRecord]) -> bytes:
    """The staged datums of ``records``, back to back."""
    return b"".join(part for p, o, k, v in records for part in (staged_head(p, o, k, len(v)), v))


class KafkaMessage(Protocol):
    """What ``Batch.fill`` reads of a consumed record (confluent-kafka's ``Message``)."""

    def error(self) -> object | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...


@dataclass
class Group:
    """The staged datums of one writer schema in a batch: head and value, alternating."""

    parts: list[bytes] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.parts) // 2

    def body(self) -> bytes:
        return b"".join(self.parts)

    def records(self) -> Iterator[SinkRecord]:
        """The records back from their staged datums (the rare paths that need them)."""
        parts = self.parts
        for i in range(0, len(parts), 2):
            head, value = parts[i], parts[i + 1]
            partition, offset, _size = META.unpack_from(head)
            length, start = read_zigzag(head, META_SIZE)
            yield partition, offset, head[start : start + length] or None, value


@dataclass(frozen=True)
class Undecodable:
    """A record ClickHouse cannot decode, kept with the reason and its bytes."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    schema_id: int
    reason: str


def _unframed(partition: int, offset: int, key: bytes | None, value: bytes | None) -> Undecodable:
    reason = (
        "empty value (tombstone)"
        if not value
        else "not Confluent wire format (magic byte 0 and a schema id expected)"
    )
    return Undecodable(partition, offset, key, value, -1, reason)


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
        """File one record (the sink's hot path: under a microsecond)."""
        if partition not in self.first:
            self.first[partition] = offset
        self.count += 1
        if value is not None and len(value) > HEADER_SIZE and value[0] == MAGIC:  # frame.is_framed, inlined
            size = len(value)
            self.size += size
            group = self.groups.get(value[ID_SLICE])
            if group is None:
                group = self.groups[value[ID_SLICE]] = Group()
            if not key:
                group.parts += (_META_AND_SHORT_KEY(partition, offset, size, 0), value)
            elif len(key) < _SHORT_KEY:
                group.parts += (_META_AND_SHORT_KEY(partition, offset, size, len(key) << 1) + key, value)
            else:
                group.parts += (staged_head(partition, offset, key, size), value)
        else:
            self.size += len(value) if value else 0
            self.undecodable.append(_unframed(partition, offset, key, value))

    def fill(
        self,
        messages: Sequence[KafkaMessage],
        start: int,
        next_offsets: dict[int, int],
        max_rows: int,
        max_bytes: int,
    ) -> tuple[int, int]:
        """``add`` for ``messages[start:]`` in one loop, until the batch is full or a message
        carries an error; return (index of the first message not taken, records skipped).

        The same work as ``SinkCore.add`` + ``add`` per record, inlined: a consumed record costs
        one Python loop iteration instead of two calls, which is most of the consuming thread's
        time. Records below ``next_offsets`` (already stored) are skipped; ``next_offsets`` is
        advanced past every record taken.
        """
        first, groups, undecodable = self.first, self.groups, self.undecodable
        header_size, magic, id_slice = HEADER_SIZE, MAGIC, ID_SLICE  # locals: read once per record
        count, size, skipped = self.count, self.size, 0
        index, end = start, len(messages)
        try:
            while index < end and count < max_rows and size < max_bytes:
                message = messages[index]
                if message.error() is not None:
                    break
                index += 1
                partition: int = message.partition()  # type: ignore[assignment]  # set when no error
                offset: int = message.offset()  # type: ignore[assignment]
                if offset < next_offsets.get(partition, 0):
                    skipped += 1
                    continue
                next_offsets[partition] = offset + 1
                if partition not in first:
                    first[partition] = offset
                count += 1
                key, value = message.key(), message.value()
                if value is not None and len(value) > header_size and value[0] == magic:
                    length = len(value)
                    size += length
                    group = groups.get(value[id_slice])
                    if group is None:
                        group = groups[value[id_slice]] = Group()
                    if not key:
                        group.parts += (_META_AND_SHORT_KEY(partition, offset, length, 0), value)
                    elif len(key) < _SHORT_KEY:
                        head = _META_AND_SHORT_KEY(partition, offset, length, len(key) << 1) + key
                        group.parts += (head, value)
                    else:
                        group.parts += (staged_head(partition, offset, key, length), value)
                else:
                    size += len(value) if value else 0
                    undecodable.append(_unframed(partition, offset, key, value))
        finally:
            self.count, self.size = count, size
        return index, skipped

    def seal(self, next_offsets: dict[int, int]) -> None:
        """Fix the last offset per partition (the records accepted up to now)."""
        self.last = {p: next_offsets[p] - 1 for p in self.first}

    def token(self, topic: str) -> str:
        """A deduplication token that names exactly this batch's records: a retried insert of the
        same batch is dropped by ClickHouse instead of landing twice."""
        spans = ";".join(f"{p}:{self.first[p]}-{self.last[p]}" for p in sorted(self.first))
        return hashlib.sha256(f"{topic}|{spans}|{self.count}".encode()).hexdigest()[:40]
