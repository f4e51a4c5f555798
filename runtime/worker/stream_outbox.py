"""Stream records published on the event loop, handed to the producer once per loop turn.

A worker publishes about six stream records a step (runtime.worker.streaming). One producer call
per record cost the loop a fifth of its time under load: each takes the client's locks while it
holds the GIL, which the loop needs for every run. Gathered over a loop turn, they leave in one
call per topic (runtime.log.kafka.stream: each message names its partition), however many
partitions the turn's runs are in.

Order is kept per run: a record published from another thread (a sync model's deltas, from its
pool thread) goes out at once, after what the loop has gathered so far -- so an attempt's start,
gathered on the loop, precedes the deltas of that attempt.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Protocol

# (topic, partition, key, value)
StreamRecord = tuple[str, int, bytes, bytes]


class StreamOut(Protocol):
    """Where stream records go (runtime.log.kafka.stream.StreamProducer): never blocks."""

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None: ...

    def publish_many(self, records: Sequence[StreamRecord]) -> None: ...

    def flush(self, timeout: float = 5.0) -> None: ...


class TurnOutbox:
    """Gathers the records published on a running event loop until the end of its turn."""

    def __init__(self, out: StreamOut) -> None:
        self.out = out
        self._pending: list[StreamRecord] = []
        self._lock = threading.Lock()  # the loop gathers, a pool thread drains before its own

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        loop = asyncio._get_running_loop()  # None off the loop: a pool thread
        with self._lock:
            if loop is None:
                self._drain_locked()
                self.out.publish(topic, partition, key, value)
                return
            self._pending.append((topic, partition, key, value))
            if len(self._pending) > 1:
                return  # the turn's drain is scheduled already
        loop.call_soon(self.drain)

    def publish_all(self, records: list[StreamRecord]) -> None:
        """``publish`` each of ``records``, in order, with one lock (an activation's records)."""
        loop = asyncio._get_running_loop()
        with self._lock:
            if loop is None:
                self._drain_locked()
                self.out.publish_many(records)
                return
            scheduled = bool(self._pending)  # the turn's drain is scheduled already
            self._pending += records
        if not scheduled:
            loop.call_soon(self.drain)

    def drain(self) -> None:
        with self._lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        if self._pending:
            records, self._pending = self._pending, []
            self.out.publish_many(records)

    def flush(self, timeout: float = 5.0) -> None:
        """What is gathered, and what the producer holds, sent (within ``timeout``)."""
        self.drain()
        self.out.flush(timeout)
