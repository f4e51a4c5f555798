"""The Kafka backend of the log port: the writer, the reader, the workers' group and the
ownership check, each built from this deployment's settings."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
)

from runtime.config import Settings
from runtime.log.kafka.auth import check_credentials
from runtime.log.kafka.config import reader_config
from runtime.log.kafka.group import KafkaCommandFeed, commands_owner
from runtime.log.kafka.ownership import KafkaOwnershipCheck
from runtime.log.kafka.reader import read_partition, read_partitions, watermarks
from runtime.log.kafka.tail import KafkaTail
from runtime.log.kafka.writer import EventWriter
from runtime.log.port.protocol import LogRecord, ReadError


class KafkaLog:
    """The Kafka backend of the log port (``runtime.log.port.protocol.EventLog``).

    The producer and the reading consumer are made on first use; a worker calls ``connect``
    at start so both are connected by the time partitions arrive (rebuilds read with them).

    A read assigns its consumer the partitions it reads, so two reads at once must not share one:
    a record decoded inside a rebuild's read may need a key read from the keys topic
    (runtime.log.sealing), and a thread fetching a late key reads beside the event loop.
    Each read borrows an idle reading consumer, or makes another, and gives it back when it ends."""

    def __init__(self, settings: Settings, *, idempotent: bool = True) -> None:
        check_credentials(settings)  # wrong SASL credentials would make every later call hang
        self.settings = settings
        # Not idempotent: a write retried after a lost ack may land twice (for records whose
        # readers ignore a repeat), and the first write does not wait for a ProducerId.
        self.idempotent = idempotent
        self._writer: EventWriter | None = None
        self._readers: list[Consumer] = []  # every reading consumer made, idle or lent
        self._idle: list[Consumer] = []
        self._lending = threading.Lock()

    def connect(self) -> KafkaLog:
        _ = self.writer
        self._give_back(self._borrow())
        return self

    @property
    def writer(self) -> EventWriter:
        if self._writer is None:
            self._writer = (
                EventWriter(self.settings)
                if self.idempotent
                else EventWriter(self.settings, **{"enable.idempotence": False})
            )
        return self._writer

    def _borrow(self) -> Consumer:
        with self._lending:
            if self._idle:
                return self._idle.pop()
        reader = Consumer(reader_config(self.settings))
        with self._lending:
            self._readers.append(reader)
        return reader

    def _give_back(self, reader: Consumer) -> None:
        with self._lending:
            if reader in self._readers:  # not closed meanwhile
                self._idle.append(reader)

    @contextlib.contextmanager
    def _lent(self) -> Iterator[Consumer]:
        reader = self._borrow()
        try:
            yield reader
        finally:
            self._give_back(reader)

    @property
    def failure(self) -> str | None:
        return None if self._writer is None else self._writer.failure

    def append(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> Future[int]:
        return self.writer.append(topic, partition, key, value)

    def append_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        records: list[tuple[bytes | None, bytes]],
        watched: dict[int, asyncio.Future[int]],
    ) -> None:
        self.writer.append_batch_async(loop, topic, partition, records, watched)

    def append_unwatched(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        self.writer.append_unwatched(topic, partition, key, value)

    def read(
        self,
        topic: str,
        partition: int,
        start: int | None = None,
        end: int | None = None,
        keep: Callable[[bytes | None], bool] | None = None,
    ) -> Iterator[LogRecord]:
        with self._lent() as reader:
            yield from read_partition(self.settings, topic, partition, start, end, consumer=reader, keep=keep)

    def read_partitions(
        self, topic: str, ranges: Mapping[int, tuple[int | None, int | None]]
    ) -> Iterator[tuple[int, LogRecord]]:
        with self._lent() as reader:
            yield from read_partitions(self.settings, topic, ranges, consumer=reader)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        with self._lent() as reader:
            return watermarks(reader, topic, partition)

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has; None if the cluster has no such topic (a watermarks
        query would wait a minute for it). ReadError if the cluster does not answer."""
        with self._lent() as reader:
            try:
                found = reader.list_topics(topic, timeout=10).topics.get(topic)
            except KafkaException as exc:
                raise ReadError(f"cannot read the metadata of {topic}: {exc}") from exc
        if found is None or (
            found.error is not None
            and found.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
        ):
            return None
        return len(found.partitions)  # another error (a leader being elected): it exists

    def join(self, worker_id: str, session_timeout_ms: int) -> KafkaCommandFeed:
        return KafkaCommandFeed(self.settings, worker_id, session_timeout_ms)

    def tail(self, topic: str) -> KafkaTail:
        return KafkaTail(self.settings, topic)

    def commands_owner(self, partition: int) -> str | None:
        return commands_owner(self.settings, partition)

    def ownership(
        self, loop: asyncio.AbstractEventLoop, is_claim: Callable[[int, bytes], bool]
    ) -> KafkaOwnershipCheck:
        return KafkaOwnershipCheck(self.settings, loop, is_claim, self.writer)

    def flush(self, timeout: float = 30.0) -> None:
        if self._writer is not None:
            self._writer.flush(timeout)

    def close(self) -> None:
        writer, self._writer = self._writer, None
        with self._lending:
            readers, self._readers, self._idle = self._readers, [], []
        try:
            if writer is not None:
                writer.close()
        finally:
            for reader in readers:
                reader.close()
