"""The workers' consumer group on the commands topic -- joinable before the rest is imported.

A restarted worker's recovery time starts with its process: joining the group (with static
membership, to get its partitions straight back) takes a few hundred milliseconds, and so
does importing the registry client and the user's app. ``join_early`` starts the join first;
the partition callbacks are only ever called from ``consume()``, by which time the worker
exists to answer them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from runtime.config import Settings

Callback = Callable[[Consumer, list[TopicPartition]], None]


def consumer_config(settings: Settings, worker_id: str, session_timeout_ms: int) -> dict[str, Any]:
    return {
        **settings.kafka_common(),
        "group.id": settings.worker_group,
        # Static membership: a restarted worker with the same id gets its partitions back at
        # once instead of after the session timeout.
        "group.instance.id": worker_id,
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(100, session_timeout_ms // 5),
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # The broker answers a waiting fetch as soon as a command arrives; the wait only spaces
        # out empty fetches.
        "fetch.wait.max.ms": 100,
    }


class Membership:
    """A subscribed consumer whose partition callbacks are bound later, to the worker."""

    def __init__(self, settings: Settings, worker_id: str, session_timeout_ms: int) -> None:
        self.consumer = Consumer(consumer_config(settings, worker_id, session_timeout_ms))
        self.on_assign: Callback | None = None
        self.on_revoke: Callback | None = None
        self.consumer.subscribe(
            [settings.commands_topic],
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._revoked,
        )

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.on_assign is None:
            raise RuntimeError("partitions assigned before the worker was bound")
        self.on_assign(consumer, partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.on_revoke is not None:
            self.on_revoke(consumer, partitions)
