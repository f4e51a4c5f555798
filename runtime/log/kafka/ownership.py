"""Knowing, cheaply, that we still own a partition: a tail of our own writes.

A worker reads the events partitions it owns, from its claim on, behind its own writer (one
consumer, one thread, for every owned partition). Whatever has been read without meeting a
newer ``EpochClaimed`` is proven ours: a zombie that meets another worker's claim stops there,
and never starts an effect whose ``...Scheduled`` record lies beyond it. Only records without
a key (partition records: claims) are decoded; the rest is counted.

The tail reads only while someone waits (an effect about to start, a checkpoint): the owned
partitions are assigned to its consumer when a check arrives, read from where the last check
stopped, and unassigned once no check waits. An assigned consumer prefetches every record as it
is written, and that fetch traffic, per write, on the same broker, slows every step. A check
catches up in bulk (1000 records a fetch).

With a foreign-record check (``notice_foreign``; runtime.worker.foreign), the tail also reads
once every ``SWEEP_S`` with no check waiting, up to where the partitions end, so a record another
writer appended is met within seconds even on a partition with nothing else to do; each keyed
record read is handed to the check (a set lookup), and the ones it calls foreign go to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from runtime.config import Settings
from runtime.log.kafka.config import know_topic, offset_of, reader_config

log = logging.getLogger("agentlog.ownership")

SWEEP_S = 1.0  # with a foreign-record check: the longest a record goes unread with no check waiting
SWEEP_READ_S = 0.2  # the longest one sweep keeps the partitions assigned

# (partition, offset, key, value) of each keyed record the foreign-record check did not recognise
Foreign = list[tuple[int, int, bytes, bytes]]


@dataclass
class _Watch:
    epoch: int
    verified_upto: int  # every record below this offset was read: no foreign claim among them
    fenced: bool = False
    waiters: list[tuple[int, asyncio.Future[bool]]] = field(default_factory=list)


class KafkaOwnershipCheck:
    """Tracks, per owned partition, up to which offset our ownership is proven."""

    def __init__(
        self, settings: Settings, loop: asyncio.AbstractEventLoop, is_claim: Callable[[int, bytes], bool]
    ) -> None:
        self.settings = settings
        self.is_claim = is_claim
        self.loop = loop
        self._watches: dict[int, _Watch] = {}
        self._running = True
        self._demand = threading.Event()  # set while a check waits; the thread reads only then
        # A short fetch wait: the consumer is assigned only while a check waits, and a partition
        # unassigned with a long-poll fetch in flight cannot be assigned again until it returns.
        self._consumer = Consumer(
            reader_config(settings, **{"enable.partition.eof": False, "fetch.wait.max.ms": 5})
        )
        self._foreign_check: Callable[[int, bytes], bool] | None = None
        # Partition -> the first offset the foreign-record check has not met: a read starts again from
        # ``verified_upto``, which the loop advances a moment later, and a record met twice would be
        # foreign the second time (the check forgets a link once it meets it). The tail thread's own.
        self._unchecked: dict[int, int] = {}
        self._foreign_report: Callable[[Foreign], None] | None = None
        self._next_sweep = 0.0
        self._thread = threading.Thread(target=self._run, name="agentlog-ownership", daemon=True)
        self._thread.start()

    def notice_foreign(self, check: Callable[[int, bytes], bool], report: Callable[[Foreign], None]) -> None:
        """Hand each keyed record read to ``check(partition, value)`` (on the tail's thread: True
        if foreign), and those it calls foreign to ``report`` (on the loop); read every ``SWEEP_S``."""
        self._foreign_check, self._foreign_report = check, report

    def watch(self, partition: int, epoch: int) -> None:
        self._watches[partition] = _Watch(epoch, epoch + 1)
        self._unchecked[partition] = epoch + 1

    def unwatch(self, partition: int) -> None:
        watch = self._watches.pop(partition, None)
        if watch is not None:
            for _, waiter in watch.waiters:
                if not waiter.done():
                    waiter.set_result(False)
        if not any(w.waiters for w in self._watches.values()):
            self._demand.clear()

    async def owned_through(self, partition: int, offset: int) -> bool:
        """True once ``offset`` has been read with no foreign claim before it; False if fenced."""
        watch = self._watches.get(partition)
        if watch is None or watch.fenced:
            return False
        if offset < watch.verified_upto:
            return True
        waiter: asyncio.Future[bool] = self.loop.create_future()
        watch.waiters.append((offset, waiter))
        self._demand.set()
        return await waiter

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=5)
        self._consumer.close()

    # -- the tail thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        topic = self.settings.events_topic
        # librdkafka learns the leaders of a topic it was never asked about on its periodic topic
        # scan, up to a second after the first assign: the first effect of a fresh worker would
        # wait that long for its ownership check. Asking once now makes the topic known.
        know_topic(self._consumer, topic)
        while self._running:
            if not self._demand.wait(0.2):
                if self._foreign_check is not None and time.monotonic() >= self._next_sweep:
                    self._sweep()
                continue
            # A check waits: read every owned partition from where the last reading stopped.
            starts = {p: w.verified_upto for p, w in list(self._watches.items()) if not w.fenced}
            if not starts:
                time.sleep(0.005)  # the check's partition was just lost; unwatch() answers it
                continue
            self._consumer.incremental_assign([TopicPartition(topic, p, o) for p, o in starts.items()])
            try:
                # Until no check waits -- or a partition was taken meanwhile: then assign again.
                while self._running and self._demand.is_set() and self._watches.keys() <= starts.keys():
                    self._read_some(starts)
            finally:
                self._consumer.incremental_unassign([TopicPartition(topic, p) for p in starts])

    def _sweep(self) -> None:
        """Read the owned partitions towards their end (nothing waits for it): the foreign-record check."""
        self._next_sweep = time.monotonic() + SWEEP_S
        topic = self.settings.events_topic
        starts = {p: w.verified_upto for p, w in list(self._watches.items()) if not w.fenced}
        if not starts:
            return
        self._consumer.incremental_assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        # At most SWEEP_READ_S a sweep: under steady writes the end moves on, and an assigned
        # consumer's fetches slow every step; the next sweep (or check) goes on from there.
        until = time.monotonic() + SWEEP_READ_S
        try:
            while self._running and self._read_some(starts, 0.05) and time.monotonic() < until:
                pass
        finally:
            self._consumer.incremental_unassign([TopicPartition(topic, p) for p in starts])

    def _read_some(self, assigned: dict[int, int], wait_s: float = 0.01) -> bool:
        """Read what is there (waiting up to ``wait_s`` for a first record); False if nothing was."""
        progress: dict[int, int] = {}
        fenced: set[int] = set()
        foreign: Foreign = []
        check = self._foreign_check
        # poll() returns at the first record; consume() then drains what is already here.
        # (consume(n, timeout) alone waits for n records or the whole timeout: an effect would
        # wait that long for its ownership check.)
        first = self._consumer.poll(wait_s)
        if first is None:
            return False
        for message in [first, *self._consumer.consume(num_messages=1000, timeout=0)]:
            if message.error() is not None:
                continue
            partition, offset = message.partition() or 0, offset_of(message)
            watch = self._watches.get(partition)
            if watch is None or partition not in assigned:
                continue
            partition_record = message.key() is None and offset > watch.epoch and bool(message.value())
            if partition_record and self.is_claim(partition, message.value() or b""):
                fenced.add(partition)
                continue
            if partition not in fenced:
                progress[partition] = offset + 1
                key, value = message.key(), message.value()
                if check is not None and offset >= self._unchecked.get(partition, watch.epoch + 1):
                    self._unchecked[partition] = offset + 1
                    if key is not None and value and check(partition, value):
                        foreign.append((partition, offset, key, value))
        if progress or fenced:
            self.loop.call_soon_threadsafe(self._advance, progress, fenced)
        if foreign and self._foreign_report is not None:
            self.loop.call_soon_threadsafe(self._foreign_report, foreign)
        return True

    def _advance(self, progress: dict[int, int], fenced: set[int]) -> None:
        for partition, watch in self._watches.items():
            if partition in fenced:
                watch.fenced = True
                log.warning(
                    "partition %s: a newer epoch claimed it; our writes from here on are fenced", partition
                )
            elif partition in progress:
                watch.verified_upto = max(watch.verified_upto, progress[partition])
            else:
                continue
            still: list[tuple[int, asyncio.Future[bool]]] = []
            for offset, waiter in watch.waiters:
                if watch.fenced or offset < watch.verified_upto:
                    if not waiter.done():
                        waiter.set_result(not watch.fenced)
                else:
                    still.append((offset, waiter))
            watch.waiters = still
        if not any(watch.waiters for watch in self._watches.values()):
            self._demand.clear()
