"""Knowing, cheaply, that we still own a partition: our own acks, and a tail for what they miss.

Before an effect starts, the worker proves that no newer ``EpochClaimed`` precedes its
``...Scheduled`` record. A claim is a record without a key; a keyed record this worker appended
cannot be one, and its ack names its offset. So the proof of an owned partition (every offset
below ``ProvenPrefix.upto``; runtime.log.kafka.proven) grows with our own keyed acks, counted on
the writer's delivery thread (:meth:`KafkaOwnershipCheck.acked`) before the ack reaches the loop:
a Scheduled record's check finds it proven already, and nothing is read. A zombie that lost the
partition meets the newer owner's claim as a gap: an offset below its Scheduled record that is not
one of its acks.

A gap -- a record another writer appended (a claim, a forgery), or one of ours not counted (a
keyless record, one acked before the watch) -- is read by the tail: a consumer thread that reads
the owned partitions from where the proof stops, only while a check waits (an effect about to
start, a checkpoint). Whatever it reads without meeting a newer claim is proven ours; a newer
claim fences the partition, and no effect whose Scheduled record lies beyond it starts. The
partitions are assigned to its consumer when a check arrives and unassigned once none waits: an
assigned consumer prefetches every record as it is written, and that fetch traffic slows every
step -- and reading our own writes back would cost the worker a Python loop over each of them.

With a foreign-record check (``notice_foreign``; runtime.worker.foreign), the tail also reads
once every ``SWEEP_S`` with no check waiting, from where the proof stops up to where the
partitions end, so a record another writer appended is met within seconds even on a partition
with nothing else to do; each keyed record read is handed to the check (a set lookup), and the
ones it calls foreign go to the loop. Our own acked records are not read again: a foreign record
among them is a gap, and the proof stops at it until it is read.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, TopicPartition

from runtime.config import Settings
from runtime.log.kafka.config import know_topic, offset_of, reader_config
from runtime.log.kafka.proven import ProvenPrefix
from runtime.log.kafka.writer import EventWriter

log = logging.getLogger("agentlog.ownership")

SWEEP_S = 1.0  # with a foreign-record check: the longest a record goes unread with no check waiting
SWEEP_READ_S = 0.2  # the longest one sweep keeps the partitions assigned

# (partition, offset, key, value) of each keyed record the foreign-record check did not recognise
Foreign = list[tuple[int, int, bytes, bytes]]


@dataclass
class _Watch:
    epoch: int
    proven: ProvenPrefix  # no foreign claim below its ``upto``: read, or acked as ours and keyed
    fenced: bool = False
    waiters: list[tuple[int, asyncio.Future[bool]]] = field(default_factory=list)


class KafkaOwnershipCheck:
    """Tracks, per owned partition, up to which offset our ownership is proven."""

    def __init__(
        self,
        settings: Settings,
        loop: asyncio.AbstractEventLoop,
        is_claim: Callable[[int, bytes], bool],
        writer: EventWriter | None = None,
    ) -> None:
        """``writer``: the producer of this worker's appends, whose acks prove its own records (without
        it, every record is read, as before)."""
        self.settings = settings
        self.is_claim = is_claim
        self.loop = loop
        self._watches: dict[int, _Watch] = {}
        # The writer's delivery thread (acked), the tail's results (on the loop) and the checks
        # all move a proof and look at its waiters; under this lock, so no waiter is missed.
        self._lock = threading.Lock()
        self.records_read = 0  # by the tail, over its life (the tests see a check read nothing)
        self._running = True
        self._demand = threading.Event()  # set while a check waits; the thread reads only then
        # A short fetch wait: the consumer is assigned only while a check waits, and a partition
        # unassigned with a long-poll fetch in flight cannot be assigned again until it returns.
        self._consumer = Consumer(
            reader_config(settings, **{"enable.partition.eof": False, "fetch.wait.max.ms": 5})
        )
        self._foreign_check: Callable[[int, bytes], bool] | None = None
        # Partition -> the first offset the foreign-record check has not met: a read starts again from
        # the proof (``proven.upto``), which the loop advances a moment later, and a record met twice would be
        # foreign the second time (the check forgets a link once it meets it). The tail thread's own.
        self._unchecked: dict[int, int] = {}
        self._foreign_report: Callable[[Foreign], None] | None = None
        self._next_sweep = 0.0
        self._thread = threading.Thread(target=self._run, name="agentlog-ownership", daemon=True)
        self._thread.start()
        self._writer = writer
        if writer is not None:
            writer.on_acked = self.acked

    def notice_foreign(self, check: Callable[[int, bytes], bool], report: Callable[[Foreign], None]) -> None:
        """Hand each keyed record read to ``check(partition, value)`` (on the tail's thread: True
        if foreign), and those it calls foreign to ``report`` (on the loop); read every ``SWEEP_S``."""
        self._foreign_check, self._foreign_report = check, report

    def watch(self, partition: int, epoch: int) -> None:
        self._watches[partition] = _Watch(epoch, ProvenPrefix(epoch + 1))
        self._unchecked[partition] = epoch + 1

    def acked(self, message: Message) -> None:
        """On the writer's delivery thread, before the ack is handed on: a record we appended was
        acknowledged. A keyed one of an owned events partition is proven not to be a claim."""
        if message.key() is None or message.topic() != self.settings.events_topic:
            return
        watch = self._watches.get(message.partition() or 0)
        offset = message.offset()
        if watch is None or offset is None:  # no offset: not proven, and nothing raised on this thread
            return
        with self._lock:
            wake = watch.proven.ours(offset) and bool(watch.waiters)
        if wake:  # a check waited for a gap our later acks did not close alone: see if they did now
            self.loop.call_soon_threadsafe(self._advance, {}, set())

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
        with self._lock:
            if offset < watch.proven.upto:
                return True  # the steady state: the Scheduled record's own ack proved it
            waiter: asyncio.Future[bool] = self.loop.create_future()
            watch.waiters.append((offset, waiter))
        self._demand.set()
        return await waiter

    def close(self) -> None:
        if self._writer is not None and self._writer.on_acked == self.acked:
            self._writer.on_acked = None
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
            starts = {p: w.proven.upto for p, w in list(self._watches.items()) if not w.fenced}
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
        starts = {p: w.proven.upto for p, w in list(self._watches.items()) if not w.fenced}
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
        messages = [first, *self._consumer.consume(num_messages=1000, timeout=0)]
        self.records_read += len(messages)
        for message in messages:
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
        """On the loop: what the tail read (or, with nothing, what our acks proved) answers the checks."""
        with self._lock:
            for partition, watch in self._watches.items():
                if partition in fenced and not watch.fenced:
                    watch.fenced = True
                    log.warning(
                        "partition %s: a newer epoch claimed it; our writes from here on are fenced",
                        partition,
                    )
                elif partition in progress:
                    watch.proven.read_to(progress[partition])
                still: list[tuple[int, asyncio.Future[bool]]] = []
                for offset, waiter in watch.waiters:
                    if watch.fenced or offset < watch.proven.upto:
                        if not waiter.done():
                            waiter.set_result(not watch.fenced)
                    else:
                        still.append((offset, waiter))
                watch.waiters = still
            waiting = any(watch.waiters for watch in self._watches.values())
        if not waiting:
            self._demand.clear()
