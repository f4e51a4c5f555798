"""The workers' consumer group on the commands topic -- joinable before the rest is imported.

A restarted worker's recovery time starts with its process: joining the group (with static
membership, to get its partitions straight back) takes a few hundred milliseconds, and so does
importing the registry client and the user's app. Joining first lets the two overlap; the
partition callbacks are only ever called from ``poll()``, by which time the worker exists to
answer them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import AssignCallback, Delivery, MembershipFenced, RevokeCallback


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


class KafkaCommandFeed:
    """A subscribed consumer whose partition callbacks are bound later, to the worker."""

    def __init__(self, settings: Settings, worker_id: str, session_timeout_ms: int) -> None:
        self.topic = settings.commands_topic
        self.session_timeout_ms = session_timeout_ms
        self.consumer = Consumer(consumer_config(settings, worker_id, session_timeout_ms))
        self._on_assign: AssignCallback | None = None
        self._on_revoke: RevokeCallback | None = None
        self._paused: set[int] = set()  # partitions paused (runtime.worker.admission)
        self.fenced = False
        self.consumer.subscribe(
            [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )

    def bind(self, on_assign: AssignCallback, on_revoke: RevokeCallback) -> None:
        self._on_assign, self._on_revoke = on_assign, on_revoke

    def poll(self, max_records: int, timeout_s: float) -> list[Delivery]:
        deliveries: list[Delivery] = []
        if timeout_s > 0:
            # Block until the first record (consume(n, timeout) would wait for all n or the whole
            # timeout), then take what else has arrived.
            first = self.consumer.poll(timeout_s)
            if first is None:
                return deliveries
            messages = [first, *self.consumer.consume(num_messages=max_records - 1, timeout=0)]
        else:
            messages = self.consumer.consume(num_messages=max_records, timeout=0)
        for message in messages:
            error: KafkaError | None = message.error()
            if error is not None:
                # A consumer's only fatal error is its static membership fenced (librdkafka
                # raises it as _FATAL; the underlying FENCED_INSTANCE_ID is in its text). Besides
                # an impostor with the same id, librdkafka reaches it by itself when its session
                # timed out while the group coordinator moved (librdkafka issue 3437).
                if error.fatal() or error.code() == KafkaError._FATAL:
                    self.fenced = True
                    raise MembershipFenced(error.str())
                if error.code() == KafkaError.INVALID_SESSION_TIMEOUT:  # retried forever otherwise
                    raise AgentlogError(
                        f"the workers' group refused --session-timeout-ms {self.session_timeout_ms}: it must lie "
                        "within the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms "
                        "(6000 and 1800000 unless the cluster sets them)"
                    )
                deliveries.append(Delivery(message.partition() or 0, -1, None, None, str(error)))
                continue
            offset = message.offset()
            assert offset is not None  # consumed records always have one
            deliveries.append(Delivery(message.partition() or 0, offset, message.key(), message.value()))
        return deliveries

    def commit(self, partition: int, offset: int) -> None:
        self.consumer.commit(offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=True)

    def pause(self, partitions: list[int]) -> None:
        # librdkafka's pause: its fetch queue of those partitions is purged, and fetching resumes
        # at the next record not delivered. A partition revoked meanwhile is not assigned: left alone.
        assigned = {tp.partition for tp in self.consumer.assignment()}
        wanted = [p for p in partitions if p in assigned]
        if wanted:
            self.consumer.pause([TopicPartition(self.topic, p) for p in wanted])
            self._paused.update(wanted)

    def resume(self, partitions: list[int]) -> None:
        wanted = [p for p in partitions if p in self._paused]
        if wanted:
            self.consumer.resume([TopicPartition(self.topic, p) for p in wanted])
            self._paused.difference_update(wanted)

    def close(self) -> None:
        if not self.fenced:
            self.consumer.close()
            return
        # A fenced consumer cannot leave the group it no longer belongs to; close() reports that
        # fatal state again, and there is nothing left to hand over.
        with contextlib.suppress(KafkaException):
            self.consumer.close()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._on_assign is None:
            # Not bound to a worker (it failed to start and the feed is closing): accept the
            # assignment, unread, so the rebalance completes and close() can leave the group.
            consumer.incremental_assign(partitions)
            return
        starts = self._on_assign([tp.partition for tp in partitions])
        for tp in partitions:
            tp.offset = starts[tp.partition]
        consumer.incremental_assign(partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # A paused partition is resumed as it goes: assigned here again later, it must be fetched.
        self.resume([tp.partition for tp in partitions])
        del consumer
        if self._on_revoke is not None:
            self._on_revoke([tp.partition for tp in partitions])


def commands_owner(settings: Settings, partition: int) -> str | None:
    """The worker id (static membership: its group.instance.id) the workers' group has assigned
    the commands ``partition`` to, as the group coordinator says now; None if no member holds it.

    The coordinator's assignment, not the last ``EpochClaimed`` in the events topic: a claim
    stays the latest one long after its worker died, while a dead member leaves the group (and
    its partitions) when its session times out."""
    from confluent_kafka.admin import AdminClient  # only on this rare path: a result that timed out

    admin = AdminClient(settings.kafka_common())
    group = settings.worker_group
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    for member in description.members:
        assigned = member.assignment.topic_partitions if member.assignment is not None else []
        if any(tp.topic == settings.commands_topic and tp.partition == partition for tp in assigned):
            return str(member.group_instance_id or member.client_id or member.member_id)
    return None
