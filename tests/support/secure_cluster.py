"""The security table's 3-node secure cluster (infra.kafka: what ``infra up --brokers 3 --secure
--tls`` starts: SASL/SCRAM over TLS, the StandardAuthorizer, a CA of the stack's own), shared by the modules of the table so the suite starts one, not one per module.

It runs on 19720-19722 (controllers 19730-19732) in front of the shared registry. The modules that
use it (``secure_cluster`` fixture, tests/conftest.py) are one xdist group (SAME_PORTS) and run back
to back; the cluster stops after the last test that needs it (conftest's runtest teardown hook),
not at the end of the session, so three JVMs do not sit idle under the rest of the suite.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from infra import kafka, kafka_tls, kafka_users, process
from runtime.config import Settings

PORT = 19720
CONTROLLER_PORT = 19730
NODES = 3
ADMIN = "agent-admin"
# Unique per session: finding it anywhere is a leak, not a coincidence.
ADMIN_PASSWORD = f"adm-{uuid.uuid4().hex}"
FIXTURE = "secure_cluster"


class SecureCluster:
    """A cluster started on first ``up()`` and stopped by ``down()``; ``up()`` again restarts it."""

    def __init__(self, base: Settings, state: Path) -> None:
        self.settings = base.model_copy(
            update={
                "state_dir": state,
                "kafka_port": PORT,
                "kafka_controller_port": CONTROLLER_PORT,
                "bootstrap_servers": ",".join(f"127.0.0.1:{PORT + i}" for i in range(NODES)),
                "kafka": {
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(kafka_tls.ca_path(state / "kafka")),
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": ADMIN,
                    "sasl.password": ADMIN_PASSWORD,
                },
            }
        )
        self.running = False

    def up(self) -> Settings:
        if not self.running:
            kafka.configure(self.settings, NODES, secure=True, tls=True)
            busy = [
                p
                for n in kafka.nodes(self.settings)
                for p in (n.port, n.controller_port)
                if n.running_pid() is None and process.port_open("127.0.0.1", p)
            ]
            if busy:
                raise AssertionError(
                    f"ports {busy} are in use: a cluster of an earlier, aborted run may still be up"
                )
            self.running = True  # before start: a half-started cluster is stopped too
            kafka.start(self.settings, lambda _m: None)
        return self.settings

    def down(self) -> None:
        if self.running:
            self.running = False
            kafka.stop(self.settings)


def as_user(deployment: Settings, name: str) -> Settings:
    """``deployment`` as role user ``name`` (its credentials file from ``infra users add``)."""
    conf = json.loads(kafka_users.credentials_path(deployment, name).read_text())
    return deployment.model_copy(update={"kafka": conf})
