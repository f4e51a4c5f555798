"""The Kafka side of run streams: a producer that never blocks its caller, and a follower of one
partition that says when retention dropped what it had not read.

Streams are views (runtime.log.records.stream): a record the producer cannot take at once is
dropped and counted, never waited for, so a watcher's slowness or a broker's never reaches a run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.kafka.config import know_topic, offset_of, reader_config
from runtime.log.kafka.reader import watermarks
from runtime.log.port.protocol import LogRecord

logger = logging.getLogger("agentlog.stream")
POLL_EVERY = 256  # publishes between two polls of the producer


class StreamProducer:
    """Appends stream and exposed-state records without waiting for them (``publish`` returns at
    once). Idempotent, so a retried batch neither repeats nor reorders a run's records; not
    transactional. Thread-safe: a sync model adapter publishes its deltas from a pool thread."""

    def __init__(self, settings: Settings) -> None:
        self._producer = Producer(
            {
                **settings.kafka_common(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 1,  # a model's deltas come in bursts: a millisecond batches them
                "partitioner": "murmur2_random",
                "compression.type": "lz4",
                "queue.buffering.max.messages": 200_000,
                "message.timeout.ms": 30_000,
                # Nothing here waits for an ack: a report per record only costs a poll to serve
                # it (a fifth of a worker's step, polled per record). Only failures are reported.
                "delivery.report.only.error": True,
            }
        )
        self.dropped = 0  # records not taken (the queue was full): a watcher misses them
        self._unpolled = 0  # publishes since the last poll (a count shared by threads: a hint only)

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        try:
            self._producer.produce(topic, value, key, partition=partition)
        except BufferError:
            self.dropped += 1
        except KafkaException as error:  # a view: the run goes on without it
            self.dropped += 1
            logger.warning("stream record dropped: %s", error)
        self._polled(1)

    def publish_many(self, records: Sequence[tuple[str, int, bytes, bytes]]) -> None:
        """``publish`` each of (topic, partition, key, value): one producer call per topic, each
        message naming its partition (a record keeps its place in its partition's queue). A call
        costs more than its records: each takes the client's locks with the GIL held, and a loop
        turn's records span many partitions."""
        batches: dict[str, list[dict[str, Any]]] = {}
        for topic, partition, key, value in records:
            messages = batches.get(topic)
            if messages is None:
                messages = batches[topic] = []
            messages.append({"key": key, "value": value, "partition": partition})
        for topic, messages in batches.items():
            try:
                queued = self._producer.produce_batch(topic, messages)
            except KafkaException as error:  # a view: the run goes on without it
                self.dropped += len(messages)
                logger.warning("stream records dropped: %s", error)
                continue
            self.dropped += len(messages) - queued  # the queue was full
        self._polled(len(records))

    def _polled(self, published: int) -> None:
        # Serves the failures' reports and the client's errors now and then; never waits. Not per
        # record: a poll releases and retakes the GIL, which the worker's event loop needs.
        self._unpolled += published
        if self._unpolled >= POLL_EVERY:
            self._unpolled = 0
            self._producer.poll(0)

    def flush(self, timeout: float = 5.0) -> None:
        self._producer.flush(timeout)


class StreamGap(AgentlogError):
    """Retention deleted records of the followed partition before they were read."""

    def __init__(self, partition: int, wanted: int, first_held: int) -> None:
        super().__init__(
            f"the stream's retention dropped records {wanted}..{first_held - 1} of partition {partition} "
            "before they were read"
        )
        self.wanted, self.first_held = wanted, first_held


class StreamFollower:
    """Follows one partition of a stream topic from an offset, as it grows. A position retention
    has deleted raises StreamGap (the caller goes on from ``StreamGap.first_held``)."""

    def __init__(self, settings: Settings, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self._consumer = Consumer(
            reader_config(
                settings,
                **{
                    "enable.partition.eof": False,
                    "fetch.wait.max.ms": 50,
                    "auto.offset.reset": "error",  # a deleted position is reported, not skipped
                    "isolation.level": "read_uncommitted",  # the stream's producer is not transactional
                },
            )
        )
        know_topic(self._consumer, topic)
        self.position: int | None = None

    def bounds(self) -> tuple[int, int]:
        """The first offset still held and the next offset to be written."""
        return watermarks(self._consumer, self.topic, self.partition)

    def offset_at(self, timestamp_ms: int) -> int:
        """The first offset written at or after ``timestamp_ms`` (the end if none is)."""
        found = self._consumer.offsets_for_times(
            [TopicPartition(self.topic, self.partition, max(0, timestamp_ms))], timeout=10
        )[0]
        if found.error is not None:
            raise KafkaException(found.error)
        if found.offset < 0 or found.offset == OFFSET_END:
            return self.bounds()[1]
        return int(found.offset)

    def start(self, offset: int) -> None:
        self.position = offset
        self._consumer.assign([TopicPartition(self.topic, self.partition, offset)])

    def poll(self, timeout_s: float) -> list[LogRecord]:
        """Records read since the last poll (waits up to ``timeout_s`` for the first); StreamGap when
        the position was deleted (the follower then goes on from the first offset still held)."""
        first = self._consumer.poll(max(0.0, timeout_s))
        messages = [] if first is None else [first, *self._consumer.consume(num_messages=500, timeout=0)]
        found: list[LogRecord] = []
        for message in messages:
            error: KafkaError | None = message.error()
            if error is not None:
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    low = self.bounds()[0]
                    wanted = self.position if self.position is not None else low
                    self.start(low)
                    raise StreamGap(self.partition, wanted, low)
                if error.fatal():
                    raise KafkaException(error)
                continue  # transient (a broker reconnecting): the consumer retries by itself
            offset = offset_of(message)
            self.position = offset + 1
            found.append(LogRecord(offset, message.key(), message.value(), message.timestamp()[1]))
        return found

    def close(self) -> None:
        self._consumer.close()
