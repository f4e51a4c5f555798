"""The in-memory backend of the log port: the same records, offsets and acks, in one process.

It serves the unit tests of the worker's semantics and ``runtime.local`` (a run without services).
It keeps every promise of ``runtime.log.port.protocol`` (the contract suite runs against it and Kafka),
and adds test controls a broker cannot offer: ``hold()`` keeps appends unacknowledged (and
unwritten) until ``release()``, ``fail_held()`` refuses them, so a test can stop the world
between "appended" and "durable".

One consumer group: the member that joined last owns every partition of the commands topic;
the member it replaced is told its partitions were revoked at its next poll, as after a
rebalance.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from runtime.config import Settings
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import (
    AssignCallback,
    Delivery,
    LogRecord,
    MembershipFenced,
    RevokeCallback,
    WriteError,
    settle,
)

_Ack = Callable[[int | BaseException], None]


@dataclass
class _Held:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    ack: _Ack | None


@dataclass
class _Group:
    owner: MemoryCommandFeed | None = None
    committed: dict[int, int] = field(default_factory=dict)


class MemoryLog:
    """Topics of ``settings.partitions`` partitions each, held in lists."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.partitions = settings.partitions
        self._topics: dict[str, list[list[LogRecord]]] = {}
        self._changed = threading.Condition()
        self._held: list[_Held] | None = None
        self._failure: str | None = None
        self.group = _Group()

    # -- test controls -----------------------------------------------------------------------------
    def hold(self) -> None:
        """From now on appends wait, unwritten and unacknowledged, for ``release`` or ``fail_held``."""
        with self._changed:
            if self._held is None:
                self._held = []

    def release(self) -> int:
        """Write and acknowledge every held append, in order; stop holding. How many there were."""
        with self._changed:
            held, self._held = self._held or [], None
        for item in held:
            self._write(item)
        return len(held)

    def fail_held(self, reason: str = "refused by the test") -> int:
        """Refuse every held append (watched ones fail, unwatched ones set ``failure``); stop holding."""
        with self._changed:
            held, self._held = self._held or [], None
        for item in held:
            error = WriteError(f"write to {item.topic}[{item.partition}] failed: {reason}")
            if item.ack is None:
                self._failure = self._failure or str(error)
            else:
                item.ack(error)
        return len(held)

    def held_count(self) -> int:
        """How many appends wait for ``release``."""
        with self._changed:
            return len(self._held or ())

    def records(self, topic: str, partition: int) -> list[LogRecord]:
        """A copy of what the partition holds."""
        with self._changed:
            return list(self._partition(topic, partition))

    # -- the port ----------------------------------------------------------------------------------
    @property
    def failure(self) -> str | None:
        return self._failure

    def append(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> Future[int]:
        future: Future[int] = Future()

        def ack(outcome: int | BaseException) -> None:
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        self._queue(topic, self._choose(partition, key), key, value, ack)
        return future

    def append_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        records: list[tuple[bytes | None, bytes]],
        watched: dict[int, asyncio.Future[int]],
    ) -> None:
        for index, (key, value) in enumerate(records):
            future = watched.get(index)
            ack = None if future is None else _loop_ack(loop, future)
            self._queue(topic, partition, key, value, ack)

    def append_unwatched(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        self._queue(topic, self._choose(partition, key), key, value, None)

    def read(
        self,
        topic: str,
        partition: int,
        start: int | None = None,
        end: int | None = None,
        keep: Callable[[bytes | None], bool] | None = None,
    ) -> Iterator[LogRecord]:
        held = self.records(topic, partition)
        stop = len(held) if end is None else min(end, len(held))
        for record in held[max(0, start or 0) : stop]:
            if keep is None or keep(record.key):
                yield record

    def read_partitions(
        self, topic: str, ranges: Mapping[int, tuple[int | None, int | None]]
    ) -> Iterator[tuple[int, LogRecord]]:
        for partition, (start, end) in ranges.items():
            for record in self.read(topic, partition, start, end):
                yield partition, record

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        with self._changed:
            return 0, len(self._partition(topic, partition))

    def join(self, worker_id: str, session_timeout_ms: int) -> MemoryCommandFeed:
        del session_timeout_ms
        feed = MemoryCommandFeed(self, worker_id)
        with self._changed:
            if self.group.owner is not None and self.group.owner.worker_id == worker_id:
                self.group.owner.fenced = True  # static membership: the newer member with the id wins
            self.group.owner = feed
        return feed

    def tail(self, topic: str) -> MemoryTail:
        return MemoryTail(self, topic)

    def commands_owner(self, partition: int) -> str | None:
        self._partition(self.settings.commands_topic, partition)  # a partition it has, or ValueError
        owner = self.group.owner
        return None if owner is None or owner.closed else owner.worker_id

    def ownership(
        self, loop: asyncio.AbstractEventLoop, is_claim: Callable[[int, bytes], bool]
    ) -> MemoryOwnershipCheck:
        del loop
        return MemoryOwnershipCheck(self, is_claim)

    def flush(self, timeout: float = 30.0) -> None:
        with self._changed:
            if self._held:
                raise WriteError(f"{len(self._held)} record(s) held unacknowledged (MemoryLog.hold)")

    def close(self) -> None:
        pass

    # -- inside --------------------------------------------------------------------------------------
    def _choose(self, partition: int | None, key: bytes | None) -> int:
        if partition is not None:
            return partition
        return 0 if key is None else partition_for(key.decode("utf-8", "replace"), self.partitions)

    def _partition(self, topic: str, partition: int) -> list[LogRecord]:
        if not 0 <= partition < self.partitions:
            raise ValueError(f"{topic} has no partition {partition} (it has {self.partitions})")
        return self._topics.setdefault(topic, [[] for _ in range(self.partitions)])[partition]

    def _queue(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, ack: _Ack | None
    ) -> None:
        item = _Held(topic, partition, key, value, ack)
        with self._changed:
            if self._held is not None:
                self._held.append(item)
                return
        self._write(item)

    def _write(self, item: _Held) -> None:
        with self._changed:
            records = self._partition(item.topic, item.partition)
            offset = len(records)
            records.append(LogRecord(offset, item.key, item.value, int(time.time() * 1000)))
            self._changed.notify_all()
        if item.ack is not None:
            item.ack(offset)

    def wait_for_change(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)

    def read_new(
        self, topic: str, positions: dict[int, int], timeout_s: float
    ) -> list[tuple[int, LogRecord]]:
        """What the partitions of ``positions`` hold from each position on (advanced past it); if
        nothing yet, waits up to ``timeout_s`` for an append."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = [
                    (partition, record)
                    for partition, position in list(positions.items())
                    for record in self._partition(topic, partition)[position:]
                ]
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    break
                self._changed.wait(remaining)
        for partition, record in found:
            positions[partition] = record.offset + 1
        return found


def _loop_ack(loop: asyncio.AbstractEventLoop, future: asyncio.Future[int]) -> _Ack:
    """Resolve ``future`` in its loop, later, as a Kafka delivery callback would."""

    def ack(outcome: int | BaseException) -> None:
        loop.call_soon_threadsafe(settle, future, outcome)

    return ack


class MemoryTail:
    """Follows partitions of one topic of a MemoryLog; ``poll`` wakes at the next append."""

    def __init__(self, log: MemoryLog, topic: str) -> None:
        self.log = log
        self.topic = topic
        self._positions: dict[int, int] = {}

    def follow(self, partition: int, start: int) -> None:
        self._positions.setdefault(partition, start)

    def poll(self, timeout_s: float) -> list[tuple[int, LogRecord]]:
        return self.log.read_new(self.topic, self._positions, timeout_s)

    def close(self) -> None:
        self._positions.clear()


class MemoryCommandFeed:
    """A member of the in-memory workers' group."""

    def __init__(self, log: MemoryLog, worker_id: str) -> None:
        self.log = log
        self.worker_id = worker_id
        self._on_assign: AssignCallback | None = None
        self._on_revoke: RevokeCallback | None = None
        self._positions: dict[int, int] = {}  # partition -> next offset to deliver
        self.paused: set[int] = set()
        self.closed = False
        self.fenced = False

    def bind(self, on_assign: AssignCallback, on_revoke: RevokeCallback) -> None:
        self._on_assign, self._on_revoke = on_assign, on_revoke

    def poll(self, max_records: int, timeout_s: float) -> list[Delivery]:
        if self.fenced:
            raise MembershipFenced(f"another member joined with worker id {self.worker_id!r}")
        owner = self.log.group.owner is self and not self.closed
        if not owner and self._positions:
            partitions, self._positions = sorted(self._positions), {}
            self.paused.clear()
            if self._on_revoke is not None:
                self._on_revoke(partitions)
        if not owner:
            return []
        if not self._positions:
            if self._on_assign is None:
                raise RuntimeError("partitions assigned before the worker was bound")
            self._positions = dict(self._on_assign(list(range(self.log.partitions))))
        deliveries = self._take(max_records)
        if not deliveries and timeout_s > 0:
            self.log.wait_for_change(timeout_s)
            deliveries = self._take(max_records)
        return deliveries

    def _take(self, max_records: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        topic = self.log.settings.commands_topic
        for partition, position in self._positions.items():
            if partition in self.paused:
                continue
            for record in self.log.read(
                topic, partition, start=position, end=position + max_records - len(deliveries)
            ):
                deliveries.append(Delivery(partition, record.offset, record.key, record.value))
                self._positions[partition] = record.offset + 1
            if len(deliveries) >= max_records:
                break
        return deliveries

    def commit(self, partition: int, offset: int) -> None:
        self.log.group.committed[partition] = offset

    def pause(self, partitions: list[int]) -> None:
        self.paused.update(partitions)

    def resume(self, partitions: list[int]) -> None:
        self.paused.difference_update(partitions)

    def close(self) -> None:
        self.closed = True


@dataclass
class _Watch:
    epoch: int
    verified_upto: int
    fenced: bool = False


class MemoryOwnershipCheck:
    """Reads the owned partitions of the events topic on demand, as the Kafka tail does."""

    def __init__(self, log: MemoryLog, is_claim: Callable[[int, bytes], bool]) -> None:
        self.log = log
        self.is_claim = is_claim
        self._watches: dict[int, _Watch] = {}
        self._foreign: (
            tuple[Callable[[int, bytes], bool], Callable[[list[tuple[int, int, bytes, bytes]]], None]] | None
        ) = None

    def watch(self, partition: int, epoch: int) -> None:
        self._watches[partition] = _Watch(epoch, epoch + 1)

    def unwatch(self, partition: int) -> None:
        self._watches.pop(partition, None)

    def notice_foreign(
        self,
        check: Callable[[int, bytes], bool],
        report: Callable[[list[tuple[int, int, bytes, bytes]]], None],
    ) -> None:
        """As the Kafka tail's, but only on the reads a check makes (no sweep in memory)."""
        self._foreign = (check, report)

    async def owned_through(self, partition: int, offset: int) -> bool:
        while True:
            watch = self._watches.get(partition)
            if watch is None or watch.fenced:
                return False
            if offset < watch.verified_upto:
                return True
            for record in self.log.read(self.log.settings.events_topic, partition, start=watch.verified_upto):
                if (
                    record.key is None
                    and record.offset > watch.epoch
                    and self.is_claim(partition, record.value or b"")
                ):
                    watch.fenced = True
                    return False
                watch.verified_upto = record.offset + 1
                if self._foreign is not None and record.key is not None and record.value:
                    check, report = self._foreign
                    if record.offset > watch.epoch and check(partition, record.value):
                        report([(partition, record.offset, record.key, record.value)])
            if offset < watch.verified_upto:
                return True
            await asyncio.sleep(0.001)  # the record is not written yet (held): look again

    def close(self) -> None:
        self._watches.clear()
