"""The local stack: PostgreSQL, then the schema registry, then Kafka and its topics.

``up`` is idempotent (running services are left alone), ``down`` stops what runs from this
state folder, ``status`` says what runs where. Both up and down hold a lock on the state folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra import kafka, kafka_users, postgres, process, registry, topics
from infra.paths import file_lock, state_dir
from runtime.config import Settings


@dataclass(frozen=True)
class ServiceInfo:
    """One local service: where it listens, its pid (None when stopped) and its log file."""

    name: str
    address: str
    pid: int | None
    log_path: Path
    running: bool


def _quiet(_message: str) -> None:
    return None


def _ports(settings: Settings) -> list[tuple[str, int]]:
    ports = [("postgres_port", settings.postgres_port), ("registry_port", settings.registry_port)]
    for node in kafka.nodes(settings):
        ports += [(f"kafka node {node.node_id} port", node.port), (f"kafka node {node.node_id} controller port", node.controller_port)]
    return ports


def _lock(settings: Settings) -> Path:
    return state_dir(settings) / ".infra.lock"


def status(settings: Settings) -> list[ServiceInfo]:
    """Each service of this state folder, in start order."""
    pg_pid = postgres.running_pid(settings)
    reg_pid = registry.running_pid(settings)
    cluster = kafka.nodes(settings)
    brokers = [
        ServiceInfo(
            kafka.SERVICE if len(cluster) == 1 else f"{kafka.SERVICE}-{node.node_id}",
            node.address,
            pid,
            node.log_path,
            pid is not None,
        )
        for node in cluster
        for pid in (node.running_pid(),)
    ]
    return [
        ServiceInfo(
            postgres.SERVICE,
            postgres.address(settings),
            pg_pid,
            postgres.log_path(settings),
            pg_pid is not None,
        ),
        ServiceInfo(
            registry.SERVICE,
            registry.url(settings),
            reg_pid,
            registry.log_path(settings),
            reg_pid is not None,
        ),
        *brokers,
    ]


def up(
    settings: Settings,
    progress: Callable[[str], None] = _quiet,
    *,
    brokers: int | None = None,
    secure: bool = False,
    tls: bool = False,
) -> list[ServiceInfo]:
    """Start whatever is not running, wait until each answers, create the topics; return the status.

    ``brokers``: the number of Kafka nodes (infra.kafka: a cluster of 3 replicates every topic
    three times); None keeps what the state folder has (1 for a new one). ``secure``: clients must
    authenticate with SASL/SCRAM-SHA-512 as the user in the settings' ``kafka`` mapping
    (infra.kafka_auth), and a user per role is made (infra.kafka_users); fixed when the state
    folder's cluster is first formatted.
    Raises infra.errors.ServiceError naming the service, the reason and its log (with its last lines).
    """
    state_dir(settings).mkdir(parents=True, exist_ok=True)
    with file_lock(_lock(settings)):
        kafka.configure(settings, brokers, secure=secure, tls=tls)
    low, high = process.ephemeral_range()
    for name, port in _ports(settings):
        if low <= port <= high:
            progress(
                f"warning: {name}={port} is in the kernel's ephemeral range ({low}-{high}); an outgoing "
                f"connection may hold that port and make the service fail to bind: prefer one below {low}"
            )
    with file_lock(_lock(settings)):
        for name, running_pid, start in (
            (postgres.SERVICE, postgres.running_pid, postgres.start),
            (registry.SERVICE, registry.running_pid, registry.start),
            (kafka.SERVICE, kafka.running_pid, kafka.start),
        ):
            pid = running_pid(settings)
            if pid is not None:
                progress(f"{name} is already running (pid {pid})")
            start(settings, progress)
        created = topics.ensure_topics(settings, bootstrap=kafka.bootstrap(settings))
        if created:
            progress(f"created topics {', '.join(created)} ({settings.partitions} partitions each)")
        if kafka.is_secure(settings):
            for name in kafka_users.ensure_default_users(settings):
                path = kafka_users.credentials_path(settings, name)
                progress(f"created Kafka user {name}; its AGENTLOG_KAFKA settings are in {path}")
        return status(settings)


def down(settings: Settings) -> list[str]:
    """Stop the registry, Kafka and PostgreSQL of this state folder; one line per service says what happened."""
    if not state_dir(settings).is_dir():
        return [f"{name}: not running" for name in (registry.SERVICE, kafka.SERVICE, postgres.SERVICE)]
    lines: list[str] = []
    with file_lock(_lock(settings)):
        for name, stop in (
            (registry.SERVICE, registry.stop),
            (kafka.SERVICE, kafka.stop),
            (postgres.SERVICE, postgres.stop),
        ):
            pid = stop(settings)
            lines.append(f"{name}: stopped (pid {pid})" if pid is not None else f"{name}: not running")
    return lines
