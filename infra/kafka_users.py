"""Role users of a secure cluster: a SCRAM credential and the ACLs of its role
(runtime.log.kafka.roles), set through infra.kafka_acl.

``agentlog infra users add NAME --role R`` makes a random password, sets it (a new one on every
run: that is the rotation; the old one stops working at once), replaces whatever ACLs NAME had by
its role's, and writes the client settings to ``<state_dir>/kafka/users/NAME.json`` (mode 0600):
the value for ``AGENTLOG_KAFKA``. The password is never printed, logged or put on a command line.
``infra up --secure`` makes one user per role this way (``agentlog-submitter``, ...), once.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from infra import kafka, kafka_auth
from infra.errors import ServiceError
from infra.kafka_acl import grant_role, set_password
from runtime.config import Settings
from runtime.log.kafka.roles import ROLES, Role

SERVICE = "kafka"
DEFAULT_USERS: dict[str, Role] = {f"agentlog-{role}": role for role in ("submitter", "worker", "sink")}


def users_dir(settings: Settings) -> Path:
    return kafka.cluster_home(settings) / "users"


def credentials_path(settings: Settings, name: str) -> Path:
    return users_dir(settings) / f"{name}.json"


def _admin(settings: Settings) -> AdminClient:
    """An admin client of the local secure cluster, as the nodes' own (super) user."""
    if not kafka.is_secure(settings):
        raise ServiceError(
            SERVICE,
            f"the state folder {kafka.cluster_home(settings).parent} holds no secure cluster: "
            "users exist only on one started with `agentlog infra up --secure`",
        )
    return AdminClient({"bootstrap.servers": kafka.bootstrap(settings), **kafka.probe_auth(settings)})


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ServiceError(SERVICE, f"user name {name!r}: letters, digits, '-', '_' and '.' only")
    if name == kafka_auth.BROKER_USER:
        raise ServiceError(SERVICE, f"{name!r} is the nodes' own user: pick another name")


def client_settings(settings: Settings, name: str, password: str) -> dict[str, str]:
    """``AGENTLOG_KAFKA`` for user ``name``: the cluster's pass-through settings with its credentials."""
    base = {k: v for k, v in settings.kafka.items() if not k.startswith("sasl.")}
    return {
        **base,
        "security.protocol": kafka_auth.protocol(kafka.cluster_home(settings)),
        **kafka_auth.tls_client_config(kafka.cluster_home(settings)),
        "sasl.mechanism": kafka_auth.MECHANISM,
        "sasl.username": name,
        "sasl.password": password,
    }


def _write_private(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.unlink(missing_ok=True)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(data) + "\n")
    staging.replace(path)


def add_user(settings: Settings, name: str, role: str) -> Path:
    """Create user ``name`` with a new random password and the ACLs of ``role`` (or rotate its
    password and reset its ACLs); return the file that holds its ``AGENTLOG_KAFKA`` settings."""
    _check_name(name)
    if role not in ROLES:
        raise ServiceError(SERVICE, f"unknown role {role!r}: one of {', '.join(ROLES)}")
    admin = _admin(settings)
    password = secrets.token_urlsafe(24)
    set_password(admin, name, password)
    grant_role(admin, name, role, settings)  # type: ignore[arg-type]  # checked against ROLES above
    path = credentials_path(settings, name)
    _write_private(path, client_settings(settings, name, password))
    return path


def ensure_default_users(settings: Settings) -> list[str]:
    """One user per role (``DEFAULT_USERS``) unless it has its credentials file already; return
    the names made. Their ACLs are set again every time (the deployment's topics may have changed)."""
    admin = _admin(settings)
    made = []
    for name, role in DEFAULT_USERS.items():
        if credentials_path(settings, name).is_file():
            grant_role(admin, name, role, settings)
        else:
            add_user(settings, name, role)
            made.append(name)
    return made
