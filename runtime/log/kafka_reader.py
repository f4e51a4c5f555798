"""Bounded reads of one partition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from runtime.config import Settings
from runtime.log.kafka_config import offset_of, reader_config
from runtime.log.port import LogRecord, ReadError


def read_partition(
    settings: Settings,
    topic: str,
    partition: int,
    start: int | None = None,
    end: int | None = None,
    consumer: Consumer | None = None,
    keep: Callable[[bytes | None], bool] | None = None,
) -> Iterator[LogRecord]:
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
                yield LogRecord(offset, key, message.value(), message.timestamp()[1])
    finally:
        if own:
            reader.close()
        else:
            reader.unassign()
