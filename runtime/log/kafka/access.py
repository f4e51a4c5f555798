"""Missing Kafka permissions, said at start.

On a cluster with an authorizer (``agentlog infra up --secure``), a process whose user lacks a
permission its role needs would otherwise fail late and obscurely: a worker's group join retried
forever, a produce that times out after its delivery timeout, a sink that reads nothing. So each
process, given SASL credentials, first asks the cluster what its user may do on the topics and
groups of its role (runtime.log.kafka.roles): a DescribeTopics and a DescribeGroups request with
the authorized operations (KIP-430), no record written, no group joined. Anything missing ends it
with one line naming the user, the operation and the resource. A topic that does not exist, or a
cluster that does not answer, is left to the usual paths.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from runtime.config import Settings
from runtime.errors import TerminalError
from runtime.log.kafka.auth import check_credentials, uses_sasl
from runtime.log.kafka.roles import Grant, Role, grants

_QUIET = logging.getLogger("agentlog.kafka.access_probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


class KafkaAccessError(TerminalError):
    """The configured Kafka user lacks a permission this process's role needs."""


def _code(exc: KafkaException) -> int | None:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error.code() if error is not None else None


def _allowed(operation: str, authorized: list[str] | None) -> bool:
    """Whether ``authorized`` (the operations the cluster says the user may do) covers ``operation``.
    None: the cluster did not say (no authorizer): nothing to refuse."""
    if authorized is None:
        return True
    return "ALL" in authorized or operation in authorized


def missing(settings: Settings, role: Role, timeout: float = 10.0) -> list[Grant]:
    """The grants of ``role`` the configured user lacks, as far as the cluster tells."""
    needed = [g for g in grants(role, settings) if g.resource in ("topic", "group") and not g.prefixed]
    admin = AdminClient(settings.kafka_common(), logger=_QUIET)
    lacking: list[Grant] = []
    topics = sorted({g.name for g in needed if g.resource == "topic"})
    described = admin.describe_topics(
        TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout
    )
    topic_ops: dict[str, list[str] | None] = {}
    for name, future in described.items():
        try:
            ops = future.result().authorized_operations
            topic_ops[name] = None if ops is None else [op.name for op in ops]
        except KafkaException as exc:
            if _code(exc) in _DENIED:
                topic_ops[name] = []  # not even DESCRIBE
    groups = sorted({g.name for g in needed if g.resource == "group"})
    group_ops: dict[str, list[str] | None] = {}
    for name, future in admin.describe_consumer_groups(
        groups, include_authorized_operations=True, request_timeout=timeout
    ).items():
        try:
            ops = future.result().authorized_operations
            group_ops[name] = None if ops is None else [op.name for op in ops]
        except KafkaException as exc:
            if _code(exc) in _DENIED:
                group_ops[name] = []
    for grant in needed:
        known = topic_ops if grant.resource == "topic" else group_ops
        if grant.name in known and not _allowed(grant.operation, known[grant.name]):
            lacking.append(grant)
    return lacking


def check_access(settings: Settings, role: Role, timeout: float = 10.0) -> None:
    """Check the SASL credentials (runtime.log.kafka.auth), then raise KafkaAccessError naming
    every permission of ``role`` the user lacks. At once without SASL."""
    if not uses_sasl(settings):
        return
    check_credentials(settings, timeout)
    lacking = missing(settings, role, timeout)
    if lacking:
        user = settings.kafka.get("sasl.username", "")
        raise KafkaAccessError(
            f"Kafka at {settings.bootstrap_servers}: user {user!r} may not "
            + "; ".join(g.describe() for g in lacking)
            + f", which a {role} needs: give it the role with `agentlog infra users add {user} --role {role}`"
        )
