"""Whether anyone may write the events topic, said once when a worker starts.

The chain, the signatures and the owners' checks (issue 40) name a record no worker wrote; they
do not keep one out. Keeping it out is the cluster's job -- TLS, SASL users per role and ACLs -- and
a worker started on a cluster that does not do it says so in one line (``deployment_open``), with
the first reason found:

1. the worker itself connects without authentication (no SASL, no client certificate): whatever
   lets it write the events topic lets anyone who reaches the brokers write it;
2. the cluster has no authorizer (DescribeAcls answers SECURITY_DISABLED);
3. an ACL allows ``User:*`` or ``User:ANONYMOUS`` to write (or do anything to) the events topic;
4. the cluster grants the worker every cluster operation: no authorizer (Kafka 4 answers
   DescribeAcls with nothing rather than SECURITY_DISABLED), or the worker runs as a super user.

A worker with a role user on a cluster with an authorizer may not describe ACLs (the role has no
cluster DESCRIBE): that answer says an authorizer runs, and nothing is said. The check runs on a
thread of its own: a worker's start does not wait for it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from runtime.config import Settings

log = logging.getLogger("agentlog.worker")
_QUIET = logging.getLogger("agentlog.kafka.openness_probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_ANYONE = ("User:*", "User:ANONYMOUS")
_WRITES = (AclOperation.WRITE, AclOperation.ALL)
# Every operation a cluster resource has: what Kafka grants when no authorizer decides.
_ALL_CLUSTER_OPS = frozenset(
    {
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }
)


def authenticated(settings: Settings) -> bool:
    """Whether the configured client proves who it is: SASL, or a TLS client certificate."""
    kafka = settings.kafka
    protocol = str(kafka.get("security.protocol", "plaintext")).lower()
    return protocol.startswith("sasl") or bool(
        kafka.get("ssl.certificate.location") or kafka.get("ssl.certificate.pem")
    )


def _open_acl(bindings: Iterable[AclBinding], topic: str) -> str | None:
    for binding in bindings:
        if (
            binding.principal in _ANYONE
            and binding.permission_type == AclPermissionType.ALLOW
            and binding.operation in _WRITES
        ):
            pattern = binding.resource_pattern_type
            kind = pattern.name.lower() if isinstance(pattern, ResourcePatternType) else str(pattern)
            return (
                f"an ACL allows {binding.principal} {binding.operation.name} on topic "
                f"{binding.name!r} ({kind}), which covers {topic}"
            )
    return None


def open_because(
    settings: Settings,
    acls: list[AclBinding] | KafkaException,
    cluster_ops: list[AclOperation] | None,
) -> str | None:
    """Why anyone may write the events topic, or None: from the answers of DescribeAcls (over the
    events topic) and DescribeCluster (this worker's authorized operations)."""
    topic = settings.events_topic
    if not authenticated(settings):
        return (
            "the worker connects to Kafka without authentication (no SASL, no client certificate): "
            f"anyone who reaches the brokers may write {topic} as it does"
        )
    if isinstance(acls, KafkaException):
        error = acls.args[0] if acls.args and isinstance(acls.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError.SECURITY_DISABLED:
            return f"the cluster has no authorizer: any user may write {topic}"
        return None  # not allowed to describe ACLs: an authorizer runs
    found = _open_acl(acls, topic)
    if found is not None:
        return found
    if cluster_ops is not None and set(cluster_ops) >= _ALL_CLUSTER_OPS:
        return (
            "the cluster grants this worker every cluster operation: it has no authorizer (any user "
            f"may write {topic}), or the worker runs as a super user instead of a role user"
        )
    return None


def describe(settings: Settings, timeout: float = 10.0) -> str | None:
    """Ask the cluster, and say why anyone may write the events topic (None: nothing found)."""
    admin = AdminClient(settings.kafka_common(), logger=_QUIET)
    topic_filter = AclBindingFilter(
        ResourceType.TOPIC,
        settings.events_topic,
        ResourcePatternType.MATCH,
        None,  # type: ignore[arg-type]  # any principal (the stub says str; None is the API's "any")
        None,  # type: ignore[arg-type]  # any host
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    acls: list[AclBinding] | KafkaException
    try:
        acls = admin.describe_acls(topic_filter, request_timeout=timeout).result()
    except KafkaException as error:
        acls = error
    try:
        cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout)
        cluster_ops = cluster.result().authorized_operations
    except KafkaException:
        cluster_ops = None
    return open_because(settings, acls, cluster_ops)


def say_if_open(settings: Settings) -> threading.Thread:
    """On a thread of its own: one warning line (``deployment_open``) if anyone may write the events topic."""

    def check() -> None:
        try:
            why = describe(settings)
        except KafkaException as error:  # the cluster did not answer: the worker's own paths say so
            log.info(json.dumps({"event": "deployment_open_unchecked", "why": str(error)}))
            return
        if why is not None:
            log.warning(
                json.dumps(
                    {
                        "event": "deployment_open",
                        "why": why,
                        "see": "docs/operating.md: the configuration a record no worker wrote is kept out in",
                    }
                )
            )

    thread = threading.Thread(target=check, name="agentlog-openness", daemon=True)
    thread.start()
    return thread
