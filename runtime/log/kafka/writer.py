"""The idempotent event writer.

Writes are idempotent (``enable.idempotence``, ``acks=all``): per partition they land once
and in order, so "record N is acked" means "every record before N is durable" -- the runtime
waits for a call's Scheduled ack before the call starts (an effect) or before its outcome is
recorded (any other call), never after recording a result.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (
    KafkaError,
    Message,
    Producer,
)

from runtime import stagemarks
from runtime.config import Settings
from runtime.log.kafka.config import offset_of, producer_config
from runtime.log.port.protocol import WriteError, settle


class EventWriter:
    """Appends encoded records; each append returns a thread-safe future of its offset."""

    def __init__(self, settings: Settings, **extra: Any) -> None:
        # Records nobody waits for report here; only a failure matters. Because the producer is
        # idempotent and ordered, a later record's ack vouches for them -- unless one failed, which
        # is why a failure is kept and the owner must stop.
        self.failure: str | None = None
        # Told of every acknowledged record on the delivery thread, before its ack is handed on
        # (the ownership check counts our own records: runtime.log.kafka.ownership).
        self.on_acked: Callable[[Message], None] | None = None
        self.producer = Producer({**producer_config(settings, **extra), "on_delivery": self._any_delivery})
        self.bytes_written = 0
        self.records_written = 0
        self._running = True
        self._poller = threading.Thread(target=self._poll, name="agentlog-delivery", daemon=True)
        self._poller.start()

    def _any_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            if self.failure is None:
                self.failure = f"write to {message.topic()}[{message.partition()}] failed: {error}"
        elif self.on_acked is not None:
            self.on_acked(message)

    def _poll(self) -> None:
        while self._running:
            self.producer.poll(0.05)

    def append(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> Future[int]:
        """Append a record; the future resolves to its offset once acknowledged."""
        future: Future[int] = Future()

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                future.set_exception(WriteError(f"write to {topic}[{partition}] failed: {error}"))
            else:
                if self.on_acked is not None:
                    self.on_acked(message)
                future.set_result(offset_of(message))

        self._produce(topic, partition, key, value, delivered)
        return future

    def append_batch_async(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        records: list[tuple[bytes | None, bytes]],
        watched: dict[int, asyncio.Future[int]],
    ) -> None:
        """Append ``records`` to one partition with one ``produce_batch``; each future in
        ``watched`` (by record index) is resolved in ``loop`` with its record's offset, one
        ``call_soon_threadsafe`` per ack. One call queues them together, so they leave in one
        produce request: a result and the next call's Scheduled record cost one round trip."""
        messages: list[dict[str, Any]] = []
        for i, (key, value) in enumerate(records):
            message: dict[str, Any] = {"key": key, "value": value}
            future = watched.get(i)
            if future is not None:
                message["callback"] = _loop_settler(loop, future, topic, partition, self)
            messages.append(message)
        self.producer.produce_batch(topic, messages, partition=partition)
        for message in messages:
            if "_error" in message:
                # Only a full local queue refuses part of a batch, and it refuses the tail:
                # queue the refused ones one by one, in order, as deliveries make room.
                self._produce(topic, partition, message["key"], message["value"], message.get("callback"))
            else:
                self.records_written += 1
                self.bytes_written += len(message["value"]) + len(message["key"] or b"")

    def append_unwatched(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        """Append a record nobody waits for (a later record's ack covers it; failures go to ``failure``)."""
        self._produce(topic, partition, key, value, None)

    def _produce(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        delivered: Callable[[KafkaError | None, Message], None] | None,
    ) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value}
        if delivered is not None:
            kwargs["on_delivery"] = delivered
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain, then go on
                self.producer.poll(0.01)
        self.bytes_written += len(value or b"") + len(key or b"")
        self.records_written += 1

    def flush(self, timeout: float = 30.0) -> None:
        # Not producer.flush(): it serves delivery reports in 10 ms slices, and with the poller
        # thread taking them it returned ~10 ms after the last ack (RunHandle.result flushes first).
        deadline = time.monotonic() + timeout
        while len(self.producer) > 0:
            if time.monotonic() >= deadline:
                raise WriteError(f"{len(self.producer)} record(s) not acknowledged within {timeout}s")
            self.producer.poll(0.001)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._running = False
            self._poller.join(timeout=2)


def _loop_settler(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[int],
    topic: str,
    partition: int,
    writer: EventWriter,
) -> Callable[[KafkaError | None, Message], None]:
    def delivered(error: KafkaError | None, message: Message) -> None:
        if stagemarks.ON:
            stagemarks.mark("broker ack", message.key())
        if error is not None:
            outcome: int | BaseException = WriteError(f"write to {topic}[{partition}] failed: {error}")
        else:
            if writer.on_acked is not None:
                writer.on_acked(message)  # before the loop hears of it: its ownership check is then proven
            outcome = offset_of(message)
        loop.call_soon_threadsafe(settle, future, outcome)

    return delivered
