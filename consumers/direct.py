"""The confluent-kafka driver: one consumer, every partition assigned by hand, read_committed.

No consumer group: the resume position comes from ClickHouse (``SinkCore.start``), and one sink
owns a store, so there is nothing for a group to coordinate. librdkafka's fetch queue is capped
(``queued.max.messages.kbytes``) and the loop stops polling while the core applies backpressure,
so memory stays bounded however far behind the sink is.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from runtime.config import Settings
from runtime.log.kafka.auth import check_credentials

from .core import SinkCore
from .gctune import bulk_collection

log = logging.getLogger("agentlog.sink.direct")

POLL_BATCH = 10_000


def consumer_config(settings: Settings, group: str) -> dict[str, object]:
    return {
        **settings.kafka_common(),
        "group.id": group,  # required by librdkafka; nothing is committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        # The memory bound of the prefetch queue. librdkafka pauses fetching for
        # fetch.queue.backoff.ms (default 1 s) whenever the queue is over its thresholds; at the
        # default a sink catching up reads in 1-second steps, far below what it can sink.
        "queued.max.messages.kbytes": 65536,
        "fetch.queue.backoff.ms": 10,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 8388608,
    }


def partitions_of(consumer: Consumer, topic: str, timeout: float = 30.0) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaException(info.error if info is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return sorted(info.partitions)


def run_direct(
    settings: Settings,
    core: SinkCore,
    stop: threading.Event,
    topic: str | None = None,
    *,
    tune_gc: bool = False,
) -> None:
    """Consume ``topic`` (default: the events topic) into ``core`` until ``stop`` is set.

    ``tune_gc``: collect garbage rarely while consuming (:mod:`consumers.gctune`). It changes
    the interpreter-wide collector, so it is for a process's entry point, not a library caller."""
    topic = topic or settings.events_topic
    check_credentials(settings)  # refused SASL credentials: say so instead of reading nothing, forever
    consumer = Consumer(consumer_config(settings, f"agentlog-sink-{topic}"))
    try:
        next_offsets = core.start()
        assignment = [
            TopicPartition(topic, p, next_offsets.get(p, OFFSET_BEGINNING))
            for p in partitions_of(consumer, topic)
        ]
        consumer.assign(assignment)
        log.info("sink reading %s from %s", topic, {tp.partition: tp.offset for tp in assignment})
        with bulk_collection() if tune_gc else contextlib.nullcontext():
            _consume(consumer, core, stop)
        core.close()
    except BaseException:
        core.close(flush=False)
        raise
    finally:
        consumer.close()


def _consume(consumer: Consumer, core: SinkCore, stop: threading.Event) -> None:
    while not stop.is_set():
        messages = consumer.consume(num_messages=POLL_BATCH, timeout=0.2)
        while messages:
            taken = core.add_messages(messages)  # stops at a message carrying an error
            if taken == len(messages):
                break
            error = messages[taken].error()
            if error is None or error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            messages = messages[taken + 1 :]
        core.maybe_flush()
