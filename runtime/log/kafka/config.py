"""librdkafka settings of agentlog's producers and readers."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message

from runtime.config import Settings


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
        "partitioner": "murmur2_random",  # the Java client's choice: see runtime.log.port.partitioning
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
        # connection at a time, so the next partition's offset query would wait behind it, once
        # per partition of a worker's rebuild.
        "fetch.wait.max.ms": 1,
        **extra,
    }


def know_topic(consumer: Consumer, topic: str) -> None:
    """Fetch ``topic``'s metadata into ``consumer``, so a later assign fetches at once.

    A consumer that is assigned a topic it holds no metadata for waits for librdkafka's periodic
    topic scan (every second) before its first fetch; a metadata request for the topic beforehand
    fills the cache the assign reads. Best effort: if the broker does not answer, the scan still
    finds the topic later.
    """
    with contextlib.suppress(KafkaException):
        consumer.list_topics(topic, timeout=10)
