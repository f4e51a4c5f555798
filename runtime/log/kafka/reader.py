"""Bounded reads of partitions."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from runtime.config import Settings
from runtime.log.kafka.config import offset_of, reader_config
from runtime.log.port.protocol import LogRecord, ReadError

# The longest one consume() of a bounded read waits for records that may never come.
_BATCH_WAIT_S = 0.01


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
    for _, record in read_partitions(settings, topic, {partition: (start, end)}, consumer, keep):
        yield record


def read_partitions(
    settings: Settings,
    topic: str,
    ranges: Mapping[int, tuple[int | None, int | None]],
    consumer: Consumer | None = None,
    keep: Callable[[bytes | None], bool] | None = None,
) -> Iterator[tuple[int, LogRecord]]:
    """``(partition, record)`` of several partitions at once, each from its ``start`` (None: the
    beginning) up to its ``end`` (None: the end now); in offset order within a partition,
    interleaved across them.

    One assignment fetches every partition in the same requests: a worker taking twelve
    partitions pays for one round of offset queries and fetches instead of twelve in a row.
    """
    own = consumer is None
    reader = consumer or Consumer(reader_config(settings))
    try:
        bounds = offset_bounds(reader, topic, sorted(ranges))
        stops: dict[int, int] = {}  # partition -> the offset it is read up to (exclusive)
        position: dict[int, int] = {}  # partition -> the next offset expected
        assignment: list[TopicPartition] = []
        for partition, (start, end) in ranges.items():
            low, high = bounds[partition]
            stop = high if end is None else min(end, high)
            first = low if start is None or start < low else start
            if first < stop:
                stops[partition] = stop
                position[partition] = first
                assignment.append(
                    TopicPartition(topic, partition, first if start is not None else OFFSET_BEGINNING)
                )
        if not stops:
            return
        reader.assign(assignment)
        deadline = time.monotonic() + 60
        while stops:
            # Ask for no more than what is left: consume() returns as soon as that many arrived. What
            # is left counts offsets, and some hold nothing to deliver (an aborted transaction's
            # records and markers, what compaction removed): then fewer arrive, and the call returns
            # at its timeout -- kept short, as every call on a partition with holes ends that way.
            left = sum(stops[p] - position[p] for p in stops)
            for message in reader.consume(num_messages=max(1, min(1000, left)), timeout=_BATCH_WAIT_S):
                part = message.partition()
                until = stops.get(part) if part is not None else None
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if part is None or until is None:
                    continue  # fetched before its partition was done
                if error is not None:  # the end of what the partition holds now
                    # read_committed stops at the last stable offset; an open transaction
                    # (another writer's) can hold it below ``until`` for a while
                    if offset_of(message) >= until:
                        del stops[part]
                    elif time.monotonic() > deadline:
                        raise ReadError(f"{topic}[{part}] stuck at {message.offset()} < {until}")
                    continue
                offset = offset_of(message)
                position[part] = offset + 1
                if offset + 1 >= until:
                    del stops[part]
                if offset >= until:
                    continue
                key = message.key()
                if keep is not None and not keep(key):
                    continue
                yield part, LogRecord(offset, key, message.value(), message.timestamp()[1])
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
    """The partition's low and high watermarks (see ``offset_bounds``)."""
    return offset_bounds(reader, topic, [partition], patience_s)[partition]


def offset_bounds(
    reader: Consumer, topic: str, partitions: list[int], patience_s: float = WATERMARK_PATIENCE_S
) -> dict[int, tuple[int, int]]:
    """Partition -> its low and high watermarks (the high one is the last stable offset under
    read_committed), in one ListOffsets request per bound for all of ``partitions``; asked again
    (with fresh metadata, so a newly elected leader is found) while a leader is being elected;
    ReadError (retryable) if none answers within ``patience_s``."""
    if not partitions:
        return {}
    deadline = time.monotonic() + patience_s
    while True:
        try:
            # As timestamps, OFFSET_BEGINNING and OFFSET_END ask for the earliest and latest offsets.
            lows = reader.offsets_for_times(
                [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions], timeout=10
            )
            highs = reader.offsets_for_times(
                [TopicPartition(topic, p, OFFSET_END) for p in partitions], timeout=10
            )
            failed = next((tp.error for tp in (*lows, *highs) if tp.error is not None), None)
            if failed is not None:
                raise KafkaException(failed)
            return {
                low.partition: (int(low.offset), int(high.offset))
                for low, high in zip(lows, highs, strict=True)
            }
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if (error is not None and error.code() in _ANSWERS) or time.monotonic() > deadline:
                raise ReadError(f"cannot read the offsets of {topic}{partitions}: {exc}") from exc
        time.sleep(0.5)
        with contextlib.suppress(KafkaException):
            reader.list_topics(topic, timeout=5)  # a metadata request: who leads the partition now
