"""A worker says when anyone may write the events topic (runtime.log.kafka.openness): the decision
from the cluster's answers, which the integration tests get from real clusters."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from runtime.config import Settings
from runtime.log.kafka.openness import open_because

pytestmark = pytest.mark.unit

SASL = Settings(
    kafka={
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "w",
        "sasl.password": "p",
    }
)
ROLE_OPS = [AclOperation.DESCRIBE]


def _acl(
    principal: str, operation: AclOperation, name: str = "agentlog.", prefixed: bool = True
) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def test_a_worker_without_authentication_says_anyone_may_write() -> None:
    why = open_because(Settings(), [], ROLE_OPS)
    assert why is not None and "without authentication" in why and "agentlog.events" in why
    tls_client = Settings(kafka={"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"})
    assert open_because(tls_client, [], ROLE_OPS) is None  # a client certificate names its user


def test_no_authorizer_or_an_acl_for_anyone_is_named() -> None:
    disabled = KafkaException(KafkaError(KafkaError.SECURITY_DISABLED, "No Authorizer is configured."))
    why = open_because(SASL, disabled, None)
    assert why is not None and "no authorizer" in why
    for principal in ("User:*", "User:ANONYMOUS"):
        for operation in (AclOperation.WRITE, AclOperation.ALL):
            why = open_because(SASL, [_acl(principal, operation)], ROLE_OPS)
            assert why is not None and principal in why and operation.name in why, (principal, operation)
    # Kafka 4 without an authorizer answers DescribeAcls with nothing; every cluster operation is granted.
    everything = [
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    ]
    why = open_because(SASL, [], everything)
    assert why is not None and "every cluster operation" in why


def test_a_closed_cluster_says_nothing() -> None:
    role_acls = [
        _acl("User:worker", AclOperation.WRITE, "agentlog.events", prefixed=False),
        _acl("User:*", AclOperation.READ),  # anyone may read: not a writer
    ]
    assert open_because(SASL, role_acls, ROLE_OPS) is None
    denied = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied"))
    assert open_because(SASL, denied, None) is None  # may not describe ACLs: an authorizer runs
