"""``infra up --secure --tls``: the SASL listener speaks TLS (SASL_SSL) with a CA and node
certificate the stack made (infra.kafka_tls); role users get the CA in their settings; a run goes
through it end to end; a client that does not speak TLS, or does not trust the CA, gets nothing.

One broker of its own (infra.kafka) on 19700 (controller 19701), the shared registry.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra import kafka, kafka_tls, kafka_users
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from support.workers import APP, WorkerProcess

pytestmark = pytest.mark.integration

PORT = 19700
CONTROLLER_PORT = 19701


@pytest.fixture(scope="module")
def cluster(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    state = tmp_path_factory.mktemp("tls")
    settings = services.model_copy(
        update={
            "state_dir": state,
            "kafka_port": PORT,
            "kafka_controller_port": CONTROLLER_PORT,
            "bootstrap_servers": f"127.0.0.1:{PORT}",
            "kafka": {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(kafka_tls.ca_path(state / "kafka")),
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "agent-admin",
                "sasl.password": f"adm-{uuid.uuid4().hex}",
            },
        }
    )
    kafka.configure(settings, 1, secure=True, tls=True)
    try:
        kafka.start(settings, lambda _m: None)
        yield settings
    finally:
        kafka.stop(settings)


def as_user(deployment: Settings, name: str) -> Settings:
    conf = json.loads(kafka_users.credentials_path(deployment, name).read_text())
    return deployment.model_copy(update={"kafka": conf})


def test_the_node_key_is_private_and_the_ca_is_what_role_users_trust(cluster: Settings) -> None:
    home = kafka.cluster_home(cluster)
    assert stat.S_IMODE(os.stat(kafka_tls.keystore_path(home)).st_mode) == 0o600
    deployment = scratch_deployment(cluster, partitions=1)
    kafka_users.add_user(deployment, "tls-sub", "submitter")
    conf = as_user(deployment, "tls-sub").kafka
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["ssl.ca.location"] == str(kafka_tls.ca_path(home))


class _Lines(logging.Handler):
    """librdkafka's log lines of one client (its ``logger``), kept instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        # Plaintext at a TLS listener: the node accepts the connection and hangs up on the first
        # request (a node that is down refuses the connection instead, "in state CONNECT").
        ({"security.protocol": "SASL_PLAINTEXT"}, ("connection closed by peer", "in state APIVERSION_QUERY")),
        # The system's CAs, which did not sign the node's certificate.
        (
            {"ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"},
            ("SSL handshake failed", "certificate verify failed"),
        ),
    ],
    ids=["no-tls", "untrusted-ca"],
)
def test_a_client_without_tls_or_the_ca_gets_nothing(
    cluster: Settings, change: dict[str, str], failure: tuple[str, ...]
) -> None:
    if "ssl.ca.location" in change:
        assert Path(change["ssl.ca.location"]).is_file()
    logged = _Lines()
    # A logger of its own, outside logging's tree; librdkafka logs at its level: the hang-up is INFO.
    logger = logging.Logger("tls-test", logging.INFO)
    logger.addHandler(logged)
    admin = AdminClient({**cluster.kafka_common(), **change, "logger": logger})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(0)  # serves the log lines to the logger
    # The failure named, not any: a client gets nothing from a node that is down either.
    assert any(all(part in line for part in failure) for line in logged.lines), logged.lines


def test_a_run_goes_through_sasl_ssl_with_role_users(cluster: Settings, tmp_path: Path) -> None:
    deployment = scratch_deployment(cluster, partitions=1)
    kafka_users.add_user(deployment, "tls-worker", "worker")
    kafka_users.add_user(deployment, "tls-client", "submitter")
    worker = WorkerProcess(as_user(deployment, "tls-worker"), APP, "w1", tmp_path / "worker.log")
    try:
        with Client(as_user(deployment, "tls-client")) as client:
            run = client.submit("short", {"order": "tls-1", "steps": 2}).run_id
            assert client.run(run).result(timeout=60) == "tls-1"
    finally:
        worker.stop()
