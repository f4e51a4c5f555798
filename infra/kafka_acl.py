"""Kafka ACLs and SCRAM credentials through the Admin API (``create_acls``, ``delete_acls``,
``alter_user_scram_credentials``): a user's password, and the ACLs of its role
(runtime.log.kafka.roles) on one deployment. Who calls them: infra.kafka_auth (the clients'
admin user at every start) and infra.kafka_users (``agentlog infra users add``).
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# confluent_kafka.admin re-exports these without __all__, so mypy --strict wants their home module.
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from infra.errors import ServiceError
from runtime.config import Settings
from runtime.log.kafka.roles import Grant, Role, grants

SERVICE = "kafka"
SCRAM_ITERATIONS = 8192

_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.BROKER,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
}


def binding(principal: str, grant: Grant) -> AclBinding:
    return AclBinding(
        _RESOURCES[grant.resource],
        grant.name,
        ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
        principal,
        "*",
        getattr(AclOperation, grant.operation),
        AclPermissionType.ALLOW,
    )


def set_password(admin: AdminClient, name: str, password: str) -> None:
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS), password.encode()
    )
    try:
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
            future.result()
    except KafkaException as exc:
        raise ServiceError(SERVICE, f"could not set the SCRAM credential of {name!r}: {exc}") from exc


def _key(acl: AclBinding) -> tuple[object, ...]:
    return (
        acl.restype,
        acl.name,
        acl.resource_pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission_type,
    )


def grant_role(admin: AdminClient, name: str, role: Role, settings: Settings) -> tuple[int, int]:
    """Make the ACLs of ``User:name`` those of ``role`` on ``settings``' deployment; return how
    many were created and how many removed.

    The missing ones are created before the stale ones are removed, and the ones it has stay: a
    process of the user that runs meanwhile is never denied what its role allows (a worker
    refused a produce for a moment would stop)."""
    principal = f"User:{name}"
    # None matches any resource name and any host (the stubs say str).
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        principal,
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    wanted = {_key(acl): acl for acl in (binding(principal, g) for g in grants(role, settings))}
    try:
        existing = {_key(acl): acl for acl in admin.describe_acls(everything, request_timeout=30).result()}
        missing = [acl for key, acl in wanted.items() if key not in existing]
        stale = [
            AclBindingFilter(
                acl.restype,
                acl.name,
                acl.resource_pattern_type,
                acl.principal,
                acl.host,
                acl.operation,
                acl.permission_type,
            )
            for key, acl in existing.items()
            if key not in wanted
        ]
        if missing:
            for future in admin.create_acls(missing, request_timeout=30).values():
                future.result()
        if stale:
            for future in admin.delete_acls(stale, request_timeout=30).values():
                future.result()
    except KafkaException as exc:
        raise ServiceError(SERVICE, f"could not set the ACLs of {principal} (role {role}): {exc}") from exc
    return len(missing), len(stale)
