"""Run streams on any log port -- the in-memory log's, where there is no Kafka: what
runtime.log.kafka.stream does on Kafka, for a client and a worker sharing a ``MemoryLog``.

``LogStreamOut`` is where a worker publishes (``Worker(..., stream=LogStreamOut(log))``): each
record appended without waiting for its ack, as the Kafka producer does. ``LogFollower`` follows
one partition of the stream topic for a watcher (runtime.client.streaming picks it for a log that
is not Kafka). Such a log keeps every record while it lives, so a follower never meets a gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from runtime.log.port.protocol import EventLog, LogRecord


class PartitionFollower(Protocol):
    """Follows one partition of a topic from an offset, as it grows (runtime.log.kafka.stream's
    ``StreamFollower`` on Kafka, ``LogFollower`` on any log port)."""

    position: int | None

    def bounds(self) -> tuple[int, int]: ...

    def offset_at(self, timestamp_ms: int) -> int: ...

    def start(self, offset: int) -> None: ...

    def poll(self, timeout_s: float) -> list[LogRecord]: ...

    def close(self) -> None: ...


class LogStreamOut:
    """A worker's stream records appended to ``log``, never waited for."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.log.append_unwatched(topic, partition, key, value)

    def publish_many(self, records: Sequence[tuple[str, int, bytes, bytes]]) -> None:
        for topic, partition, key, value in records:
            self.log.append_unwatched(topic, partition, key, value)

    def flush(self, timeout: float = 5.0) -> None:
        """Nothing to wait for: the records were handed to the log as they were published."""


class LogFollower:
    """Follows one partition of ``topic`` on ``log`` through the port's ``tail``."""

    def __init__(self, log: EventLog, topic: str, partition: int) -> None:
        self.log, self.topic, self.partition = log, topic, partition
        self._tail = log.tail(topic)
        self.position: int | None = None

    def bounds(self) -> tuple[int, int]:
        """The first offset held and the next offset to be written."""
        return self.log.watermarks(self.topic, self.partition)

    def offset_at(self, timestamp_ms: int) -> int:
        """The first offset written at or after ``timestamp_ms`` (the end if none is)."""
        for record in self.log.read(self.topic, self.partition):
            if record.timestamp_ms >= timestamp_ms:
                return record.offset
        return self.bounds()[1]

    def start(self, offset: int) -> None:
        self._tail.close()
        self._tail = self.log.tail(self.topic)  # a tail follows a partition from where it was first told
        self._tail.follow(self.partition, offset)
        self.position = offset

    def poll(self, timeout_s: float) -> list[LogRecord]:
        """Records written since the last poll (waits up to ``timeout_s`` for the first)."""
        found = [record for partition, record in self._tail.poll(timeout_s) if partition == self.partition]
        if found:
            self.position = found[-1].offset + 1
        return found

    def close(self) -> None:
        self._tail.close()
