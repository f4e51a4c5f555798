"""The Kafka backend of the log port: the writer, the reader, the workers' group and the
ownership check, each built from this deployment's settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future

from confluent_kafka import (
    Consumer,
)

from runtime.config import Settings
from runtime.log.kafka.auth import check_credentials
from runtime.log.kafka.config import reader_config
from runtime.log.kafka.group import KafkaCommandFeed, commands_owner
from runtime.log.kafka.ownership import KafkaOwnershipCheck
from runtime.log.kafka.reader import read_partition, read_partitions, watermarks
from runtime.log.kafka.tail import KafkaTail
from runtime.log.kafka.writer import EventWriter
from runtime.log.port.protocol import LogRecord


class KafkaLog:
    """The Kafka backend of the log port (``runtime.log.port.protocol.EventLog``).

    The producer and the reading consumer are made on first use; a worker calls ``connect``
    at start so both are connected by the time partitions arrive (rebuilds read with them)."""

    def __init__(self, settings: Settings, *, idempotent: bool = True) -> None:
        check_credentials(settings)  # wrong SASL credentials would make every later call hang
        self.settings = settings
        # Not idempotent: a write retried after a lost ack may land twice (for records whose
        # readers ignore a repeat), and the first write does not wait for a ProducerId.
        self.idempotent = idempotent
        self._writer: EventWriter | None = None
        self._reader: Consumer | None = None

    def connect(self) -> KafkaLog:
        _ = self.writer, self.reader
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

    @property
    def reader(self) -> Consumer:
        if self._reader is None:
            self._reader = Consumer(reader_config(self.settings))
        return self._reader

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
        return read_partition(self.settings, topic, partition, start, end, consumer=self.reader, keep=keep)

    def read_partitions(
        self, topic: str, ranges: Mapping[int, tuple[int | None, int | None]]
    ) -> Iterator[tuple[int, LogRecord]]:
        return read_partitions(self.settings, topic, ranges, consumer=self.reader)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return watermarks(self.reader, topic, partition)

    def join(self, worker_id: str, session_timeout_ms: int) -> KafkaCommandFeed:
        return KafkaCommandFeed(self.settings, worker_id, session_timeout_ms)

    def tail(self, topic: str) -> KafkaTail:
        return KafkaTail(self.settings, topic)

    def commands_owner(self, partition: int) -> str | None:
        return commands_owner(self.settings, partition)

    def ownership(
        self, loop: asyncio.AbstractEventLoop, is_claim: Callable[[bytes], bool]
    ) -> KafkaOwnershipCheck:
        return KafkaOwnershipCheck(self.settings, loop, is_claim)

    def flush(self, timeout: float = 30.0) -> None:
        if self._writer is not None:
            self._writer.flush(timeout)

    def close(self) -> None:
        writer, reader, self._writer, self._reader = self._writer, self._reader, None, None
        try:
            if writer is not None:
                writer.close()
        finally:
            if reader is not None:
                reader.close()
