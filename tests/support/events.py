"""Reading a deployment's log back as the product wrote it (``runtime.log.kafka.reader``, ``Serde``).

What the tests observe of a worker is what it wrote: its ``EpochClaimed`` records (it owns a
partition from its claim on), the runs' events, the partitions' checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from runtime.config import Settings
from runtime.log.kafka.config import reader_config
from runtime.log.kafka.reader import read_partition
from runtime.log.records.events import EpochClaimed, Event, PartitionCheckpoint
from runtime.log.schemas.serde import Serde
from runtime.worker.rebuild import checkpoint_key


class LogReader:
    """One read_committed consumer over a deployment's topics; close it when done."""

    def __init__(self, settings: Settings, serde: Serde | None = None) -> None:
        self.settings = settings
        self.serde = serde or Serde(settings)
        self.consumer = Consumer(reader_config(settings))

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def end(self, partition: int, topic: str | None = None) -> int:
        """The partition's high watermark now: the offset its next record will get."""
        tp = TopicPartition(topic or self.settings.events_topic, partition)
        return int(self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1])

    def ends(self) -> dict[int, int]:
        return {p: self.end(p) for p in range(self.settings.partitions)}

    def events(
        self, partition: int, start: int | None = None, keep: Callable[[bytes | None], bool] | None = None
    ) -> list[tuple[int, Event]]:
        """(offset, event) of the events partition from ``start``, in offset order."""
        out: list[tuple[int, Event]] = []
        topic = self.settings.events_topic
        for record in read_partition(
            self.settings, topic, partition, start, consumer=self.consumer, keep=keep
        ):
            if record.value:
                decoded = self.serde.decode(record.value, record.key)
                assert isinstance(decoded, Event), decoded
                out.append((record.offset, decoded))
        return out

    def claims(self, partition: int, start: int | None = None) -> list[tuple[int, EpochClaimed]]:
        """The partition's ``EpochClaimed`` records from ``start`` (claims carry no key)."""
        return [
            (offset, e)
            for offset, e in self.events(partition, start, keep=lambda key: key is None)
            if isinstance(e, EpochClaimed)
        ]

    def claimed_by(self, worker: str, since: dict[int, int] | None = None) -> dict[int, int]:
        """Partition -> offset (the epoch) of the latest claim by ``worker`` at or after ``since``."""
        since = since or {}
        out: dict[int, int] = {}
        for partition in range(self.settings.partitions):
            for offset, claim in self.claims(partition, since.get(partition)):
                if claim.worker == worker:
                    out[partition] = offset
        return out

    def checkpoints(self, partition: int) -> list[PartitionCheckpoint]:
        """The partition's checkpoints, in the order they were written."""
        key = checkpoint_key(partition)
        out: list[PartitionCheckpoint] = []
        topic = self.settings.checkpoints_topic
        for record in read_partition(
            self.settings, topic, partition, consumer=self.consumer, keep=lambda k: k == key
        ):
            decoded = self.serde.decode(record.value or b"")
            if isinstance(decoded, PartitionCheckpoint):
                out.append(decoded)
        return out
