"""Bounded reads of one partition."""

from __future__ import annotations

import contextlib
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
        low, high = watermarks(reader, topic, partition)
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


# While a cluster elects a new leader for a partition (its old leader's node died: the controller
# fences it after broker.session.timeout.ms, 9 s by default) its offsets cannot be asked for, and
# librdkafka answers with whatever its handle of the dead node last knew (timed out, unknown
# partition, a destroyed handle...). Only a topic that does not exist is an answer.
WATERMARK_PATIENCE_S = 60.0
_ANSWERS = {KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}


def watermarks(
    reader: Consumer, topic: str, partition: int, patience_s: float = WATERMARK_PATIENCE_S
) -> tuple[int, int]:
    """The partition's low and high watermarks, asked again (with fresh metadata, so a newly
    elected leader is found) while its leader is being elected; ReadError (retryable) if none
    answers within ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if (error is not None and error.code() in _ANSWERS) or time.monotonic() > deadline:
                raise ReadError(f"cannot read the offsets of {topic}[{partition}]: {exc}") from exc
        time.sleep(0.5)
        with contextlib.suppress(KafkaException):
            reader.list_topics(topic, timeout=5)  # a metadata request: who leads the partition now
