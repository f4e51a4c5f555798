"""Kafka plumbing: the idempotent event writer and bounded partition reads.

Writes are idempotent (``enable.idempotence``, ``acks=all``): per partition they land once
and in order, so "record N is acked" means "every record before N is durable" -- the runtime
waits for an ack only before starting a call, never after recording a result.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from runtime.config import Settings
from runtime.errors import RetryableError


def offset_of(message: Message) -> int:
    offset = message.offset()
    if offset is None:  # only for records not yet produced; never for delivered or consumed ones
        raise ValueError("message has no offset")
    return int(offset)


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    return {
        **settings.kafka_common(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,  # a step waits on its Scheduled ack: do not hold records back
        "partitioner": "murmur2_random",  # the Java client's choice: see runtime.log.partitioning
        "compression.type": "lz4",
        "max.in.flight.requests.per.connection": 1,
        **extra,
    }


def reader_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    return {
        **settings.kafka_common(),
        "group.id": f"agentlog-reader-{uuid.uuid4().hex[:8]}",  # assign() only; never commits
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        # Reads here stop at an end known beforehand, so a fetch held at the end for more data
        # is never useful -- and it holds up the connection: the broker answers one request per
        # connection at a time, so the next partition's offset query waited behind it (10 ms
        # per partition of a worker's rebuild at 10 ms).
        "fetch.wait.max.ms": 1,
        **extra,
    }


class WriteError(RetryableError):
    """A record was not acknowledged; carries the Kafka error."""


class EventWriter:
    """Appends encoded records; each append returns a thread-safe future of its offset."""

    def __init__(self, settings: Settings, **extra: Any) -> None:
        # Records nobody waits for report here; only a failure matters. Because the producer is
        # idempotent and ordered, a later record's ack vouches for them -- unless one failed, which
        # is why a failure is kept and the owner must stop (see Worker.serve).
        self.failure: str | None = None
        self.producer = Producer({**producer_config(settings, **extra), "on_delivery": self._any_delivery})
        self.bytes_written = 0
        self.records_written = 0
        self._running = True
        self._poller = threading.Thread(target=self._poll, name="agentlog-delivery", daemon=True)
        self._poller.start()

    def _any_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None and self.failure is None:
            self.failure = f"write to {message.topic()}[{message.partition()}] failed: {error}"

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
                message["callback"] = _loop_settler(loop, future, topic, partition)
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
        if self.producer.flush(timeout) > 0:
            raise WriteError(f"{len(self.producer)} record(s) not acknowledged within {timeout}s")

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._running = False
            self._poller.join(timeout=2)


def _loop_settler(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[int], topic: str, partition: int
) -> Callable[[KafkaError | None, Message], None]:
    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            outcome: int | BaseException = WriteError(f"write to {topic}[{partition}] failed: {error}")
        else:
            outcome = offset_of(message)
        loop.call_soon_threadsafe(_settle, future, outcome)

    return delivered


def _settle(future: asyncio.Future[int], outcome: int | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class ReadError(RetryableError):
    """A partition could not be read to the requested offset."""


@dataclass(frozen=True)
class RawRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def read_partition(
    settings: Settings,
    topic: str,
    partition: int,
    start: int | None = None,
    end: int | None = None,
    consumer: Consumer | None = None,
    keep: Callable[[bytes | None], bool] | None = None,
) -> Iterator[RawRecord]:
    """Records of one partition from ``start`` (default: the beginning) up to ``end`` (default: the end now).

    ``keep`` filters on the key before anything is decoded, so a rebuild can skip the records
    of runs it does not need without paying for Avro.
    """
    own = consumer is None
    reader = consumer or Consumer(reader_config(settings))
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        stop = high if end is None else min(end, high)
        first = low if start is None or start < low else start
        if first >= stop:
            return
        reader.assign([TopicPartition(topic, partition, first if start is not None else OFFSET_BEGINNING)])
        position = first
        deadline = time.monotonic() + 60
        while position < stop:
            # Ask for no more than what is left: consume() returns as soon as that many arrived.
            for message in reader.consume(num_messages=max(1, min(1000, stop - position)), timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # read_committed stops at the last stable offset; an open transaction
                        # (another writer's) can hold it below ``stop`` for a while
                        if offset_of(message) >= stop:
                            return
                        if time.monotonic() > deadline:
                            raise ReadError(f"{topic}[{partition}] stuck at {message.offset()} < {stop}")
                        continue
                    raise KafkaException(error)
                offset = offset_of(message)
                position = offset + 1
                if offset >= stop:
                    return
                key = message.key()
                if keep is not None and not keep(key):
                    continue
                yield RawRecord(offset, key, message.value(), message.timestamp()[1])
    finally:
        if own:
            reader.close()
        else:
            reader.unassign()
