"""A SASL/SCRAM-SHA-512 broker (``agentlog infra up --secure``'s): the worker, the client and the
sink authenticate with credentials from ``AGENTLOG_KAFKA``; wrong ones end each at once with a
message naming the server; the password shows up in no record, log line or ClickHouse row.

One broker of its own (infra.kafka, infra.kafka_auth) on 27310 (controller 27311), the shared registry.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra import kafka
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from support.services import ROOT, deployment_env
from support.sink import SinkProcess, query, read_partition, wait_for_rows
from support.workers import APP, WorkerProcess

pytestmark = pytest.mark.integration

PORT = 27310
CONTROLLER_PORT = 27311
USER = "agent-sasl"
PASSWORD = f"pw-{uuid.uuid4().hex}"  # unique: finding it anywhere is a leak, not a coincidence


def credentials(password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": password,
    }


@pytest.fixture(scope="module")
def secure(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = services.model_copy(
        update={
            "state_dir": tmp_path_factory.mktemp("secure"),
            "kafka_port": PORT,
            "kafka_controller_port": CONTROLLER_PORT,
            "bootstrap_servers": f"127.0.0.1:{PORT}",
            "kafka": credentials(PASSWORD),
        }
    )
    kafka.configure(settings, 1, secure=True)
    try:
        kafka.start(settings, lambda _m: None)
        yield settings
    finally:
        kafka.stop(settings)


def test_the_secure_broker_refuses_a_client_without_credentials(secure: Settings) -> None:
    plain = secure.model_copy(update={"kafka": {}})
    with pytest.raises(KafkaException):  # the listener speaks SASL only: no metadata without it
        AdminClient(plain.kafka_common()).list_topics(timeout=3)


def test_worker_client_and_sink_authenticate_and_the_password_shows_nowhere(
    secure: Settings, tmp_path: Path
) -> None:
    deployment = scratch_deployment(secure, partitions=1)
    worker = WorkerProcess(deployment, APP, "w1", tmp_path / "worker.log")
    dsn = f"chdb://{tmp_path / 'store'}"
    sink = SinkProcess(deployment, dsn, tmp_path / "sink.log")
    try:
        with Client(deployment) as client:
            run = client.submit("short", {"order": "sasl-1", "steps": 2}).run_id
            assert client.run(run).result(timeout=60) == "sasl-1"
        events = read_partition(deployment, 0)
        wait_for_rows(dsn, deployment.events_topic, len(events), proc=sink.proc)
    finally:
        sink.stop()
        worker.stop()

    secret = PASSWORD.encode()
    topics = (deployment.commands_topic, deployment.events_topic, deployment.checkpoints_topic)
    records = [m for topic in topics for m in read_partition(deployment, 0, topic)]
    assert len(records) >= len(events) > 0
    for message in records:
        headers = b"".join(k.encode() + (v or b"") for k, v in message.headers() or [])
        assert secret not in (message.key() or b"") + (message.value() or b"") + headers, message.topic()
    for log in (tmp_path / "worker.log", tmp_path / "sink.log"):
        assert PASSWORD not in log.read_text(errors="replace"), log
    tables = [
        row[0]
        for row in query(
            dsn, "SELECT name FROM system.tables WHERE database = 'agentlog' AND engine != 'View'"
        ).rows
    ]
    assert "events" in tables
    for table in tables:
        rows = query(dsn, f"SELECT * FROM agentlog.`{table}`").rows
        assert PASSWORD not in json.dumps(rows, default=str), table
    assert int(query(dsn, "SELECT count() FROM agentlog.events").rows[0][0]) == len(events)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "command",
    [
        ["submit", "short", "--input", '{"order": "x"}'],
        ["worker", "--app", APP, "--worker-id", "wrong", "--respawn"],
        ["sink", "--dsn", "chdb:///{tmp}/never-written"],
    ],
    ids=["submit", "worker", "sink"],
)
def test_a_wrong_password_ends_the_process_with_the_server_named(
    secure: Settings, command: list[str], tmp_path: Path
) -> None:
    command = [part.replace("/{tmp}", str(tmp_path)) for part in command]
    wrong = f"wrong-{uuid.uuid4().hex}"
    settings = secure.model_copy(update={"kafka": credentials(wrong)})
    # The timeout only guards the suite against the hang this test exists to rule out.
    done = subprocess.run(
        [sys.executable, "-m", "runtime.cli", *command],
        cwd=ROOT,
        env=deployment_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"Kafka at 127.0.0.1:{PORT}: authentication failed for user '{USER}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert wrong not in done.stderr + done.stdout
    assert not list(tmp_path.iterdir()), "refused credentials, yet the process created its store"
