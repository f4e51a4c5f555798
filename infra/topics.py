"""The topics agentlog needs, created idempotently on the local broker.

Commands and events have the same partition count (run R lives in partition p of both);
events, and the large results they reference (payloads), are kept forever; checkpoints are
compacted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from infra import kafka
from infra.errors import ServiceError
from runtime.config import Settings

_QUIET = logging.getLogger("agentlog.infra.topics")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

# Errors a freshly started single node may answer while its controller settles.
_RETRIABLE = {
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NOT_CONTROLLER,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.INVALID_REPLICATION_FACTOR,  # no unfenced broker yet
}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def wanted(settings: Settings) -> list[TopicSpec]:
    """The topics of this deployment and their settings."""
    n = settings.partitions
    return [
        TopicSpec(settings.commands_topic, n, {}),
        TopicSpec(settings.events_topic, n, {"retention.ms": "-1"}),
        TopicSpec(settings.checkpoints_topic, n, {"cleanup.policy": "compact"}),
        # Results stored out of line: referenced by offset from the events, so kept as long.
        TopicSpec(settings.payloads_topic, n, {"retention.ms": "-1"}),
        # Limits' reports and lease grants (runtime.worker.limits.shared): one partition, read whole by
        # every worker at start, so kept minutes, in one-minute segments.
        TopicSpec(settings.limits_topic, 1, {"retention.ms": "600000", "segment.ms": "60000"}),
        # Schedules and what each last fired (runtime.schedules): compacted, one partition, read whole
        # by every scheduler.
        TopicSpec(settings.schedules_topic, 1, {"cleanup.policy": "compact"}),
        # What runs do as it happens (runtime.worker.streaming): a view for watchers, kept an hour;
        # the state runs expose to queries, compacted (the latest per run).
        TopicSpec(settings.stream_topic, n, {"retention.ms": "3600000", "segment.ms": "600000"}),
        TopicSpec(settings.exposed_topic, n, {"cleanup.policy": "compact"}),
        # Data keys of sealed runs (runtime.log.sealing): compacted, with short segments and
        # tombstone retention, so an erased run's key leaves the disk within minutes of `agentlog erase`.
        TopicSpec(
            settings.keys_topic,
            n,
            {
                "cleanup.policy": "compact",
                "segment.ms": "60000",
                "delete.retention.ms": "1000",
                "min.cleanable.dirty.ratio": "0.01",
                "min.compaction.lag.ms": "0",
            },
        ),
    ]


def _partition_counts(admin: AdminClient, names: list[str], timeout: float) -> dict[str, int]:
    """The partition counts of those of ``names`` that exist. It describes only these topics, not
    the cluster's every topic: a cluster of thousands of topics answers as fast as an empty one."""
    futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    counts: dict[str, int] = {}
    for name, future in futures.items():
        try:
            counts[name] = len(future.result().partitions)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    return counts


def ensure_topics(settings: Settings, timeout: float = 60.0, *, bootstrap: str | None = None) -> list[str]:
    """Create the missing topics of ``settings``; return the names created.

    The cluster is ``settings.kafka_common()`` (bootstrap servers and pass-through client settings)
    unless ``bootstrap`` names another (``stack.up`` passes the local broker). New topics get the
    broker's default replication factor (1 on the local node). Raises ServiceError if a topic exists
    with another partition count than ``settings.partitions``.
    """
    conf = settings.kafka_common()
    if bootstrap is not None:
        conf["bootstrap.servers"] = bootstrap
    admin = AdminClient(conf, logger=_QUIET)
    # Point at the local broker's log only when the cluster is the local broker.
    log = kafka.log_path(settings) if conf["bootstrap.servers"] == kafka.bootstrap(settings) else None
    specs = wanted(settings)
    created: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            existing = _partition_counts(admin, [s.name for s in specs], timeout=10.0)
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise ServiceError(kafka.SERVICE, f"cannot list topics: {exc}", log) from exc
            time.sleep(0.5)
            continue
        wrong = [
            f"{s.name} has {existing[s.name]} partitions, the settings say {s.partitions}"
            for s in specs
            if s.name in existing and existing[s.name] != s.partitions
        ]
        if wrong:
            raise ServiceError(
                kafka.SERVICE,
                "topics exist with another partition count: "
                + "; ".join(wrong)
                + " (a run's partition is fixed by the count: set `partitions` to match, or use a new state folder)",
            )
        missing = [s for s in specs if s.name not in existing]
        if not missing:
            return created
        futures = admin.create_topics(
            [
                NewTopic(s.name, num_partitions=s.partitions, replication_factor=-1, config=s.config)
                for s in missing
            ],
            request_timeout=15.0,
        )
        retry: list[str] = []
        for name, future in futures.items():
            try:
                future.result()
                created.append(name)
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                code = error.code() if error is not None else None
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # someone else made it; its partition count is checked on the next pass
                if code in _RETRIABLE and time.monotonic() < deadline:
                    retry.append(name)
                    continue
                raise ServiceError(kafka.SERVICE, f"cannot create topic {name}: {exc}", log) from exc
        if retry:
            time.sleep(0.5)


def drop_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Delete this deployment's topics (a scratch deployment's, once a benchmark is done with it);
    the names deleted. A broker holding thousands of partitions of past scratch deployments does
    more work for every request, so a sitting's later rounds would measure a slower broker."""
    admin = AdminClient(settings.kafka_common(), logger=_QUIET)
    names = [s.name for s in wanted(settings)]
    deleted: list[str] = []
    for name, future in admin.delete_topics(
        names, operation_timeout=timeout, request_timeout=timeout
    ).items():
        try:
            future.result()
            deleted.append(name)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ServiceError(kafka.SERVICE, f"cannot delete topic {name}: {exc}") from exc
    return deleted
