"""SASL/SCRAM-SHA-512 on the local Kafka nodes (``agentlog infra up --secure``).

A secure cluster's clients reach it only through a SASL_PLAINTEXT listener on ``kafka_port``
(SASL_SSL with ``--tls``: infra.kafka_tls made its certificates);
the controller listener stays plaintext (KRaft controllers cannot check SCRAM credentials: those
live in the metadata the controllers serve). Two SCRAM users exist:

- the nodes' own, ``agentlog-broker``, for the traffic between nodes and the readiness probe,
  with a random password kept in ``<state_dir>/kafka/broker.secret`` (mode 0600) and added when
  the storage is formatted (``kafka-storage format --add-scram``);
- the clients', named by ``sasl.username`` / ``sasl.password`` in ``AGENTLOG_KAFKA`` (the settings'
  ``kafka`` mapping), created or updated after every start through the nodes' user, so changing
  the password in ``AGENTLOG_KAFKA`` and running ``infra up`` again rotates it. It is the
  cluster's admin (role ``admin``: every operation on every resource), since ``infra up`` creates
  the topics through it.

Kafka's ``StandardAuthorizer`` runs on every node and denies what no ACL allows
(``allow.everyone.if.no.acl.found=false``). The super users are the nodes' own user and
``ANONYMOUS``, the principal of the plaintext controller listener (brokers register with the
controllers through it, on 127.0.0.1): on the SASL listener every principal is authenticated, so
no client is ever ``ANONYMOUS`` there. Role users and their ACLs: infra.kafka_users.

The client password never goes on a command line or into a log: it is sent to the node over the
authenticated connection only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from infra import kafka_tls
from infra.errors import ServiceError
from infra.kafka_acl import SCRAM_ITERATIONS, grant_role, set_password
from runtime.config import Settings

SERVICE = "kafka"
MECHANISM = "SCRAM-SHA-512"
PROTOCOL = "SASL_PLAINTEXT"
TLS_PROTOCOL = "SASL_SSL"  # --tls: a CA and node certificate in <state>/kafka/tls (infra.kafka_tls)
BROKER_USER = "agentlog-broker"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def secret_path(cluster_home: Path) -> Path:
    return cluster_home / "broker.secret"


def broker_password(cluster_home: Path) -> str:
    """The nodes' own SCRAM password, made on first use and kept readable by this user only."""
    path = secret_path(cluster_home)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    cluster_home.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def protocol(cluster_home: Path) -> str:
    """The client listener's protocol: SASL_SSL once the cluster has its certificates."""
    return TLS_PROTOCOL if kafka_tls.ca_path(cluster_home).is_file() else PROTOCOL


def tls_client_config(cluster_home: Path) -> dict[str, str]:
    """librdkafka settings that trust the local CA (nothing without TLS)."""
    ca = kafka_tls.ca_path(cluster_home)
    return {"ssl.ca.location": str(ca)} if ca.is_file() else {}


def client_credentials(settings: Settings, cluster_home: Path) -> tuple[str, str]:
    """The clients' user and password from the settings' ``kafka`` mapping (``AGENTLOG_KAFKA``).

    Raises ServiceError naming what is missing or contradicts a SCRAM-SHA-512 listener."""
    conf = settings.kafka
    wrong = []
    wanted = protocol(cluster_home)
    if conf.get("security.protocol", "").upper() != wanted:
        wrong.append(f'"security.protocol": "{wanted}"')
    ca = tls_client_config(cluster_home).get("ssl.ca.location")
    if ca is not None and not conf.get("ssl.ca.location"):
        wrong.append(f'"ssl.ca.location": "{ca}"')
    if conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "")).upper() != MECHANISM:
        wrong.append(f'"sasl.mechanism": "{MECHANISM}"')
    user, password = conf.get("sasl.username", ""), conf.get("sasl.password", "")
    if not user:
        wrong.append('"sasl.username": "<user>"')
    if not password:
        wrong.append('"sasl.password": "<password>"')
    if user == BROKER_USER:
        raise ServiceError(
            SERVICE, f"sasl.username {BROKER_USER!r} is the nodes' own user: pick another name"
        )
    if wrong:
        raise ServiceError(
            SERVICE,
            "a secure cluster (--secure) takes its client user from AGENTLOG_KAFKA, which must hold "
            + ", ".join(wrong),
        )
    return user, password


def listener_properties(cluster_home: Path, port: int, controller_port: int, host: str) -> dict[str, str]:
    """server.properties entries of a node whose client and inter-node listener is SASL/SCRAM
    (over TLS once the cluster has its certificates)."""
    password = broker_password(cluster_home)
    listener = protocol(cluster_home)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{BROKER_USER}" password="{password}";'
    )
    return {
        "listeners": f"{listener}://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"{listener}://{host}:{port}",
        "inter.broker.listener.name": listener,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{listener.lower()}.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{BROKER_USER};User:ANONYMOUS",
        **(kafka_tls.listener_properties(cluster_home, listener) if listener == TLS_PROTOCOL else {}),
    }


def format_arguments(cluster_home: Path) -> list[str]:
    """``kafka-storage format`` arguments that add the nodes' own SCRAM user."""
    password = broker_password(cluster_home)
    return [
        "--add-scram",
        f"{MECHANISM}=[name={BROKER_USER},iterations={SCRAM_ITERATIONS},password={password}]",
    ]


def redact_arguments(argv: list[str], cluster_home: Path) -> list[str]:
    """``argv`` with the nodes' password masked, for the log."""
    path = secret_path(cluster_home)
    password = path.read_text().strip() if path.is_file() else ""
    return [arg.replace(password, "***") if password else arg for arg in argv]


def broker_client_config(cluster_home: Path) -> dict[str, Any]:
    """librdkafka settings that authenticate as the nodes' own user (the probe, user upserts)."""
    return {
        "security.protocol": protocol(cluster_home),
        **tls_client_config(cluster_home),
        "sasl.mechanism": MECHANISM,
        "sasl.username": BROKER_USER,
        "sasl.password": broker_password(cluster_home),
    }


def ensure_client_user(settings: Settings, cluster_home: Path, bootstrap: str) -> None:
    """Create the clients' SCRAM user, or set its password to the configured one, and give it the
    ``admin`` role's ACLs."""
    user, password = client_credentials(settings, cluster_home)
    admin = AdminClient({"bootstrap.servers": bootstrap, **broker_client_config(cluster_home)})
    set_password(admin, user, password)
    grant_role(admin, user, "admin", settings)
