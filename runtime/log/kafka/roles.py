"""What each role of a deployment may do on Kafka: the grants behind its ACLs and the checks a
process makes at start (runtime.log.kafka.access).

The point of the roles is who may write history. Only a ``worker`` writes the events,
checkpoints and payloads topics; a ``submitter`` asks for work (writes commands) and reads what
``RunHandle.result`` / ``status`` / ``history`` read; the ``sink`` only reads: what it copies into the
audit store, and the data keys topic, so that the store's readers run with its credentials
(``agentlog audit``, the UI: analytics.unseal) open the sealed contents they show -- the store
itself keeps them sealed, and the sink never writes a key. Destroying a key (``agentlog erase``)
is the ``admin``'s. ``admin`` may do anything (it creates topics, registers users).

Grants name this deployment's topics and groups literally (they come from the settings), except
two families of consumer groups: ``agentlog-reader-*``, the throwaway group ids of assign-only
readers (they never join or commit; librdkafka still looks their coordinator up), and the
credential probe's. No role uses transactions (the writers are idempotent producers, which on
Kafka 3 and later need WRITE on a topic only), so none is granted a transactional id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runtime.config import Settings

ROLES = ("submitter", "worker", "sink", "admin")
Role = Literal["submitter", "worker", "sink", "admin"]
Resource = Literal["topic", "group", "cluster", "transactional_id"]
Operation = Literal["READ", "WRITE", "DESCRIBE", "ALL"]

READER_GROUPS = "agentlog-reader-"  # runtime.log.kafka.config.reader_config's group ids
PROBE_GROUP = "agentlog-auth-probe"  # runtime.log.kafka.auth's
SINK_METRICS_GROUP = "agentlog-sink-metrics"  # consumers.metrics'


@dataclass(frozen=True)
class Grant:
    """One permission: ``operation`` on the resource named ``name`` (a prefix if ``prefixed``)."""

    resource: Resource
    name: str
    operation: Operation
    prefixed: bool = False

    def describe(self) -> str:
        where = f"{self.resource.replace('_', ' ')} {self.name!r}"
        return f"{self.operation} {where}{' (prefix)' if self.prefixed else ''}"


def sink_group(topic: str) -> str:
    """The consumer group id the sink reads ``topic`` with (consumers.direct, consumers.payloads)."""
    return f"agentlog-sink-{topic}"


def grants(role: Role, settings: Settings) -> list[Grant]:
    """The permissions ``role`` needs on ``settings``' deployment."""
    s = settings
    common = [Grant("group", READER_GROUPS, "READ", prefixed=True), Grant("group", PROBE_GROUP, "READ")]
    if role == "submitter":
        return [
            Grant("topic", s.commands_topic, "WRITE"),
            # A sealed run's data key is made by its submitter (runtime.log.sealing), which
            # also reads it to open the run's result.
            *(Grant("topic", s.keys_topic, op) for op in ("READ", "WRITE")),
            # Schedules: `agentlog schedule` writes them, `agentlog scheduler` their fire times.
            *(Grant("topic", s.schedules_topic, op) for op in ("READ", "WRITE")),
            *(Grant("topic", t, "READ") for t in (s.events_topic, s.checkpoints_topic, s.payloads_topic)),
            # Watching and querying runs (Client.stream, Client.query): views the workers write.
            *(Grant("topic", t, "READ") for t in (s.stream_topic, s.exposed_topic)),
            Grant("group", s.worker_group, "DESCRIBE"),  # who holds a partition, when a result is late
            *common,
        ]
    if role == "worker":
        topics = (
            s.commands_topic,
            s.events_topic,
            s.checkpoints_topic,
            s.payloads_topic,
            s.keys_topic,
            s.limits_topic,
            s.stream_topic,
            s.exposed_topic,
        )
        return [
            # Commands too: a worker forwards a command to its run's home partition and submits
            # the next run of a continue-as-new (with its data key, when runs are sealed).
            *(Grant("topic", t, op) for t in topics for op in ("READ", "WRITE")),
            Grant("group", s.worker_group, "READ"),
            *common,
        ]
    if role == "sink":
        return [
            *(Grant("topic", t, "READ") for t in (s.events_topic, s.payloads_topic)),
            # Read only: the audit store's readers open sealed values with the sink's credentials
            # (analytics.unseal); a key is made by a submitter or a worker, destroyed by the admin.
            Grant("topic", s.keys_topic, "READ"),
            *(Grant("group", sink_group(t), "READ") for t in (s.events_topic, s.payloads_topic)),
            Grant("group", SINK_METRICS_GROUP, "READ"),
            *common,
        ]
    if role == "admin":
        return [
            Grant("cluster", "kafka-cluster", "ALL"),
            *(Grant(r, "*", "ALL") for r in ("topic", "group", "transactional_id")),
        ]
    raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")


def start_checks(role: Role, settings: Settings) -> list[Grant]:
    """The grants of ``role`` a process asks the cluster about at start (runtime.log.kafka.access):
    those on topics and groups named literally -- a prefixed grant names no resource to describe,
    and the cluster does not describe its own or transactional ids' operations this way."""
    return [g for g in grants(role, settings) if g.resource in ("topic", "group") and not g.prefixed]
