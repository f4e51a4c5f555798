"""Following partitions of a topic as they grow: a client's results feed.

One consumer, assigned (never subscribed) to the partitions a client waits on, each from the
offset its caller chose. Unlike a bounded read, the fetch is held at the broker until a record
arrives, so a record is delivered within a round trip of its ack. The hold is short (50 ms): a
partition followed later joins the next fetch request, not the one in flight, and an idle tail
costs 20 requests a second.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from runtime.config import Settings
from runtime.log.kafka.config import know_topic, offset_of, reader_config
from runtime.log.port.protocol import LogRecord


class KafkaTail:
    """A consumer that follows partitions of ``topic``; ``poll`` returns at the first record.

    Every call on the consumer happens in the thread that polls: an ``incremental_assign`` from
    another thread while a poll waits does not return. ``follow`` only queues the partition, and
    ``poll`` waits in slices of ``_SLICE_S`` so that a partition followed meanwhile is assigned
    within one slice."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(
            reader_config(settings, **{"enable.partition.eof": False, "fetch.wait.max.ms": 50})
        )
        self._followed: set[int] = set()
        self._queued: list[TopicPartition] = []
        self._lock = threading.Lock()  # follow() comes from callers' threads, poll() from the tail's
        self._topic_known = False

    def follow(self, partition: int, start: int) -> None:
        with self._lock:
            if partition not in self._followed:
                self._followed.add(partition)
                self._queued.append(TopicPartition(self.topic, partition, start))

    def poll(self, timeout_s: float) -> list[tuple[int, LogRecord]]:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                queued, self._queued = self._queued, []
            if queued:
                if not self._topic_known:  # else the first result waits for the 1 s topic scan
                    know_topic(self._consumer, self.topic)
                    self._topic_known = True
                self._consumer.incremental_assign(queued)
            # poll() returns at the first record; consume() then drains what has already arrived.
            first = self._consumer.poll(max(0.0, min(_SLICE_S, deadline - time.monotonic())))
            if first is not None:
                return self._records([first, *self._consumer.consume(num_messages=1000, timeout=0)])
            if time.monotonic() >= deadline:
                return []

    def _records(self, messages: list[Message]) -> list[tuple[int, LogRecord]]:
        found: list[tuple[int, LogRecord]] = []
        for message in messages:
            error: KafkaError | None = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                continue  # transient (a broker reconnecting): the consumer retries by itself
            found.append(
                (
                    message.partition() or 0,
                    LogRecord(offset_of(message), message.key(), message.value(), message.timestamp()[1]),
                )
            )
        return found

    def close(self) -> None:
        self._consumer.close()


_SLICE_S = 0.02
