"""The sink's core, independent of whatever consumes Kafka: accept records, write batches, resume.

A driver (``consumers.direct`` with confluent-kafka, ``consumers.faust_app`` with faust) asks
``start()`` where each partition stands, seeks there, and feeds every record it reads to
``add()`` (or a poll's worth to ``add_messages()``); it calls ``maybe_flush()`` between polls
and ``close()`` when stopping.

Checkpoint order, the same for every driver:

1. ``start`` reads the next offset per partition from ClickHouse -- the position is stored in the
   rows themselves, so it can never disagree with what was written;
2. ``add`` drops any record below the next offset (a driver that rewinds -- faust seeks to its
   own commits at times -- cannot create a duplicate), then appends to the open batch;
3. a full batch, or one older than ``flush_interval`` while the writer is idle, is sealed and
   handed to one writer thread: at most ``max_pending`` sealed batches wait behind the one
   being written, and a hand-off that finds the queue full waits up to ``backpressure_timeout``
   and then raises ``BackpressureError``: memory stays bounded, and a store that stopped
   accepting writes stops the sink instead of hanging it;
4. the writer writes each batch atomically with a deduplication token derived from its offsets,
   retrying transient failures with backoff; a batch that still fails stops the sink
   (``SinkWriteError``), and a restart resumes from step 1.

Kafka commits play no part: a restarted sink may re-read records, never re-write them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from runtime.errors import AgentlogError, TerminalError

from .batch import Batch, KafkaMessage
from .store_writer import SinkState, WriteStats

log = logging.getLogger("agentlog.sink")


class SinkError(AgentlogError):
    """Root of the sink's own errors."""


class BackpressureError(SinkError):
    """The store has not taken a batch for ``backpressure_timeout`` seconds; the sink stops rather than buffer."""


class SinkWriteError(SinkError):
    """A batch could not be written after every retry; the sink stops and resumes from the store on restart."""


class BatchWriter(Protocol):
    """The store side (``consumers.store_writer.StoreWriter``)."""

    def prepare(self) -> SinkState: ...

    def write(self, batch: Batch, token: str) -> WriteStats: ...

    def reset_stage(self) -> None: ...


@dataclass(frozen=True)
class SinkConfig:
    """Batching, retry and backpressure knobs; validated on construction."""

    # Upper bounds, reached only while the sink is behind (see ``due``). Large batches are what
    # makes catching up fast: each batch pays a fixed price (its inserts, its part, and the
    # merges that part later costs), so larger batches sink more events per second (bench/sink.py
    # compares sizes). Memory: up to three batches (one being written, one
    # waiting, one filling), each under batch_bytes of values.
    batch_rows: int = 200_000
    batch_bytes: int = 64 * 1024 * 1024
    flush_interval: float = 0.5
    max_pending: int = 1
    backpressure_timeout: float = 120.0
    retry_attempts: int = 8
    retry_backoff: float = 0.2
    retry_backoff_max: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.batch_rows <= 1_000_000:
            raise ValueError("batch_rows must be between 1 and 1,000,000 (one insert block)")
        if self.batch_bytes < 1024:
            raise ValueError("batch_bytes must be at least 1024")
        if self.flush_interval <= 0:
            raise ValueError("flush_interval must be positive")
        if self.max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        if self.retry_attempts < 1:
            raise ValueError("retry_attempts must be at least 1")


@dataclass
class SinkStats:
    rows_written: int = 0
    batches_written: int = 0
    undecodable: int = 0
    retries: int = 0
    skipped: int = 0  # records re-read below the stored position
    write_seconds: float = (
        0.0  # time the writer spent in successful writes: near the wall time, the store is the bottleneck
    )


class SinkCore:
    """Batches records for one topic and writes them through a single writer thread."""

    def __init__(self, writer: BatchWriter, topic: str, config: SinkConfig | None = None) -> None:
        self.writer = writer
        self.topic = topic
        self.config = config or SinkConfig()
        self.stats = SinkStats()
        self._next: dict[int, int] = {}
        self._durable: dict[int, int] = {}
        self._batch = Batch()
        self._queue: queue.Queue[Batch | None] = queue.Queue(maxsize=self.config.max_pending)
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._durable_lock = threading.Lock()
        self._max_rows = self.config.batch_rows  # read once per record: plain attributes
        self._max_bytes = self.config.batch_bytes
        self.started = False

    @property
    def failure(self) -> BaseException | None:
        """What stopped the writer thread, if anything did."""
        return self._failure

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> dict[int, int]:
        """Prepare the store and return the next offset per partition it already holds."""
        state = self.writer.prepare()
        self._next = dict(state.next_offsets)
        self._durable = dict(state.next_offsets)
        self._thread = threading.Thread(target=self._write_loop, name="agentlog-sink-writer", daemon=True)
        self._thread.start()
        self.started = True  # /readyz of the sink (consumers.metrics)
        return dict(self._next)

    def close(self, flush: bool = True) -> None:
        """Write what is pending (unless ``flush`` is False) and stop the writer thread."""
        try:
            if flush and self._failure is None:
                self.flush()
        finally:
            if self._thread is not None and self._thread.is_alive():
                self._queue.put(None)
                self._thread.join()
            self._thread = None

    # -- positions ----------------------------------------------------------------------------
    def next_offset(self, partition: int) -> int | None:
        """The next offset to read for ``partition`` (records accepted so far); None if it holds none."""
        return self._next.get(partition)

    def accepted_offsets(self) -> dict[int, int]:
        return dict(self._next)

    def durable_offsets(self) -> dict[int, int]:
        """Next offset per partition of what is in ClickHouse."""
        with self._durable_lock:
            return dict(self._durable)

    # -- the hot path -------------------------------------------------------------------------
    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Accept one record read in offset order; may hand a full batch to the writer (and wait)."""
        if offset < self._next.get(partition, 0):
            self.stats.skipped += 1
            return
        self._next[partition] = offset + 1
        batch = self._batch
        batch.add(partition, offset, key, value)
        if batch.count >= self._max_rows or batch.size >= self._max_bytes:
            self.hand_off()

    def add_messages(self, messages: Sequence[KafkaMessage]) -> int:
        """``add`` every message of a poll up to the first that carries an error; return its
        index (``len(messages)`` if none does). The confluent-kafka driver's hot path."""
        index, end = 0, len(messages)
        while index < end:
            batch = self._batch
            index, skipped = batch.fill(messages, index, self._next, self._max_rows, self._max_bytes)
            self.stats.skipped += skipped
            if batch.count >= self._max_rows or batch.size >= self._max_bytes:
                self.hand_off()
            elif index < end:
                break  # stopped at a message with an error
        return index

    def raise_if_failed(self) -> None:
        """Raise the writer's error, if it has stopped."""
        if self._failure is not None:
            raise self._stopped()

    def due(self) -> bool:
        """The open batch is older than ``flush_interval`` and the writer is idle.

        While the writer is busy, an early hand-off gains no latency (the batch would wait in the
        queue) and costs throughput (every batch pays a fixed price in ClickHouse: its inserts,
        its part, later merges). So a sink that is behind writes full batches, and one that is
        keeping up writes whatever arrived within ``flush_interval``.
        """
        batch = self._batch
        return (
            batch.count > 0
            and time.monotonic() - batch.created >= self.config.flush_interval
            and self._queue.unfinished_tasks == 0
        )

    def maybe_flush(self) -> None:
        """Hand off the open batch if it is due (old enough, and the writer idle)."""
        if self.due():
            self.hand_off()
        elif self._failure is not None:
            raise self._stopped()

    def hand_off(self) -> None:
        """Seal the open batch and queue it for the writer; the backpressure point."""
        if self._failure is not None:
            raise self._stopped()
        batch = self._batch
        if batch.count == 0:
            return
        batch.seal(self._next)
        try:
            self._queue.put(batch, timeout=self.config.backpressure_timeout)
        except queue.Full:
            raise BackpressureError(
                f"the analytics store has not accepted a batch for {self.config.backpressure_timeout:.0f}s "
                f"({self.config.max_pending} batch(es) of up to {self.config.batch_rows} rows waiting)"
            ) from None
        self._batch = Batch()

    def flush(self) -> None:
        """Hand off the open batch and wait until every batch is in ClickHouse."""
        self.hand_off()
        while self._queue.unfinished_tasks:
            if self._failure is not None:
                raise self._stopped()
            time.sleep(0.005)
        if self._failure is not None:
            raise self._stopped()

    # -- the writer thread --------------------------------------------------------------------
    def _stopped(self) -> SinkError:
        if isinstance(self._failure, SinkError):
            return self._failure
        error = SinkWriteError(f"the sink stopped: {self._failure}")
        error.__cause__ = self._failure
        return error

    def _write_loop(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                if self._failure is None:
                    self._write(batch)
            except BaseException as exc:  # recorded and re-raised in the driver's thread
                self._failure = exc
                log.error("sink writer stopped: %s", exc)
            finally:
                self._queue.task_done()

    def _write(self, batch: Batch) -> None:
        token = batch.token(self.topic)
        delay = self.config.retry_backoff
        for attempt in range(1, self.config.retry_attempts + 1):
            started = time.monotonic()
            try:
                stats = self.writer.write(batch, token)
            except TerminalError:
                raise
            except Exception as exc:
                if attempt == self.config.retry_attempts:
                    raise SinkWriteError(
                        f"batch of {batch.count} records (partitions {sorted(batch.first)}) failed "
                        f"{attempt} times; last error: {exc}"
                    ) from exc
                self.stats.retries += 1
                log.warning(
                    "batch write failed (attempt %d/%d), retrying in %.1fs: %s",
                    attempt,
                    self.config.retry_attempts,
                    delay,
                    exc,
                )
                time.sleep(delay)
                delay = min(delay * 2, self.config.retry_backoff_max)
                self._recover()
                continue
            self.stats.write_seconds += time.monotonic() - started
            self.stats.rows_written += stats.rows
            self.stats.undecodable += stats.undecodable
            self.stats.batches_written += 1
            with self._durable_lock:
                for partition, last in batch.last.items():
                    self._durable[partition] = last + 1
            return

    def _recover(self) -> None:
        try:
            self.writer.reset_stage()
        except Exception as exc:  # the store may still be down; the next attempt will tell
            log.warning("could not reset the stage before retrying: %s", exc)
