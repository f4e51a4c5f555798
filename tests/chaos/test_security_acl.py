"""Who may write history, on a real secure Kafka (``infra up --secure``'s StandardAuthorizer and
role users, infra.kafka_users): a submitter cannot append to the events, checkpoints or payloads
topics; a process started with a user that lacks its role's permissions ends with one line naming
them; a wrong password ends it with one line, and so does a CA that is expired or did not sign the
nodes' certificates (TLS); a run served by role users leaks no password into a
record, a log line or the process listing; ``infra users add`` again rotates the password.

The table's 3-node secure cluster (support.secure_cluster: what ``infra up --brokers 3 --secure``
starts), shared with test_security_chain.py.
"""

from __future__ import annotations

import datetime
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBindingFilter
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from analytics.unseal import Opener
from infra import kafka, kafka_acl, kafka_auth, kafka_users
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka import access
from runtime.log.kafka.auth import KafkaAuthenticationError, KafkaTLSError, check_credentials
from runtime.log.kafka.backend import KafkaLog
from runtime.log.kafka.roles import Grant
from runtime.log.port.partitioning import partition_for
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer
from support.secure_cluster import ADMIN_PASSWORD, CONTROLLER_PORT, PORT, as_user
from support.services import ROOT, deployment_env
from support.sink import SinkProcess, read_partition, wait_for_rows
from support.wait import wait_until
from support.workers import APP, WorkerProcess

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def cluster(secure_cluster: Settings) -> Settings:
    return secure_cluster


@pytest.fixture(scope="module")
def deployment(cluster: Settings) -> Settings:
    """A deployment (created as the admin) with a user per role, from ``infra users add``'s code."""
    settings = scratch_deployment(cluster, partitions=1)
    for role in ("submitter", "worker", "sink"):
        kafka_users.add_user(settings, role, role)
    return settings


def password(deployment: Settings, name: str) -> str:
    return as_user(deployment, name).kafka["sasl.password"]


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    # The timeout only guards the suite against the retry loop these tests exist to rule out.
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args],
        cwd=ROOT,
        env=deployment_env(
            settings, AGENTLOG_KAFKA_PORT=str(PORT), AGENTLOG_KAFKA_CONTROLLER_PORT=str(CONTROLLER_PORT)
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_submitter_producing_to_the_history_topics_is_refused(deployment: Settings) -> None:
    submitter = as_user(deployment, "submitter")
    producer = Producer(submitter.kafka_common())
    errors: dict[str, KafkaError | None] = {}
    topics = (deployment.events_topic, deployment.checkpoints_topic, deployment.payloads_topic)
    try:
        for topic in topics:
            producer.produce(
                topic,
                key=b"run-forged",
                value=b"a RunCompleted nobody ran",
                on_delivery=lambda err, msg: errors.__setitem__(msg.topic(), err),
            )
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert {t: e.code() if e else None for t, e in errors.items()} == {
        t: KafkaError.TOPIC_AUTHORIZATION_FAILED for t in topics
    }
    for topic in topics:  # read as the admin: nothing landed
        assert read_partition(deployment, 0, topic) == [], topic


def test_a_worker_with_the_submitters_credentials_ends_with_one_line_naming_the_permission(
    deployment: Settings,
) -> None:
    submitter = as_user(deployment, "submitter")
    done = cli(submitter, "worker", "--app", APP, "--worker-id", "impostor", "--respawn")
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "may not" in line]
    assert len(lines) == 1, done.stderr
    assert f"user 'submitter' may not READ topic '{deployment.commands_topic}'" in lines[0]
    assert f"WRITE topic '{deployment.events_topic}'" in lines[0]
    assert f"READ group '{deployment.worker_group}'" in lines[0]
    assert "Traceback" not in done.stderr
    assert submitter.kafka["sasl.password"] not in done.stderr + done.stdout


def test_a_sink_with_the_workers_credentials_ends_with_one_line(deployment: Settings, tmp_path: Path) -> None:
    worker = as_user(deployment, "worker")
    done = cli(worker, "sink", "--dsn", f"chdb://{tmp_path / 'never-written'}")
    assert done.returncode == 1, done.stderr
    assert f"user 'worker' may not READ group 'agentlog-sink-{deployment.events_topic}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "never-written").exists(), "refused permissions, yet the sink created its store"


def test_a_wrong_password_ends_a_role_user_with_one_line(deployment: Settings) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    worker = as_user(deployment, "worker")
    settings = worker.model_copy(update={"kafka": {**worker.kafka, "sasl.password": wrong}})
    done = cli(settings, "worker", "--app", APP, "--worker-id", "wrong", "--respawn")
    assert done.returncode == 1, done.stderr
    assert f"Kafka at {worker.bootstrap_servers}: authentication failed for user 'worker'" in done.stderr
    assert "Traceback" not in done.stderr
    assert wrong not in done.stderr + done.stdout


def _ca(path: Path, *, expired: bool) -> Path:
    """A self-signed CA certificate of a key of its own (it signed none of the nodes' certificates),
    valid for a day around now, or one that expired yesterday."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"agentlog test CA {path.stem}")])
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    start, end = (now - 30 * day, now - day) if expired else (now - day, now + day)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.mark.parametrize("expired", [True, False], ids=["expired-ca", "wrong-ca"])
def test_a_ca_that_does_not_verify_the_nodes_ends_a_process_with_one_line(
    deployment: Settings, tmp_path: Path, expired: bool
) -> None:
    ca = _ca(tmp_path / "ca.pem", expired=expired)
    worker = as_user(deployment, "worker")
    assert worker.kafka["security.protocol"] == "SASL_SSL"
    untrusting = worker.model_copy(update={"kafka": {**worker.kafka, "ssl.ca.location": str(ca)}})
    done = cli(untrusting, "worker", "--app", APP, "--worker-id", "untrusting", "--respawn")
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "TLS handshake failed" in line]
    assert len(lines) == 1, done.stderr
    assert f"Kafka at {worker.bootstrap_servers}: TLS handshake failed" in lines[0]
    assert "certificate" in lines[0] and str(ca) in lines[0]
    assert "Traceback" not in done.stderr
    assert worker.kafka["sasl.password"] not in done.stderr + done.stdout
    submitter = as_user(deployment, "submitter")
    with pytest.raises(KafkaTLSError, match="TLS handshake failed"):
        Client(submitter.model_copy(update={"kafka": {**submitter.kafka, "ssl.ca.location": str(ca)}}))


def test_users_add_again_rotates_the_password_and_never_prints_it(deployment: Settings) -> None:
    first = cli(deployment, "infra", "users", "add", "rotating", "--role", "submitter")
    assert first.returncode == 0, first.stderr
    path = kafka_users.credentials_path(deployment, "rotating")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    old = as_user(deployment, "rotating")
    check_credentials(old)
    assert old.kafka["sasl.password"] not in first.stdout + first.stderr
    second = cli(deployment, "infra", "users", "add", "rotating", "--role", "submitter")
    assert second.returncode == 0, second.stderr
    new = as_user(deployment, "rotating")
    assert new.kafka["sasl.password"] != old.kafka["sasl.password"]
    check_credentials(new)
    with pytest.raises(KafkaAuthenticationError):
        check_credentials(old)


def test_a_run_served_by_role_users_leaks_no_password(
    deployment: Settings, cluster: Settings, tmp_path: Path
) -> None:
    worker = WorkerProcess(as_user(deployment, "worker"), APP, "w1", tmp_path / "worker.log")
    dsn = f"chdb://{tmp_path / 'store'}"
    sink = SinkProcess(as_user(deployment, "sink"), dsn, tmp_path / "sink.log")
    try:
        with Client(as_user(deployment, "submitter")) as client:
            run = client.submit("short", {"order": "acl-1", "steps": 2}).run_id
            assert client.run(run).result(timeout=60) == "acl-1"
        events = read_partition(deployment, 0)
        wait_for_rows(dsn, deployment.events_topic, len(events), proc=sink.proc)
        listing = subprocess.run(
            ["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        sink.stop()
        worker.stop()

    secrets = [
        ADMIN_PASSWORD,
        kafka_auth.broker_password(kafka.cluster_home(cluster)),  # formatted in through a java @argfile
        *(password(deployment, r) for r in ("submitter", "worker", "sink")),
    ]
    topics = (deployment.commands_topic, deployment.events_topic, deployment.checkpoints_topic)
    records = [m for topic in topics for m in read_partition(deployment, 0, topic)]
    assert len(records) >= len(events) > 0
    logs = [tmp_path / "worker.log", tmp_path / "sink.log", *(n.log_path for n in kafka.nodes(cluster))]
    for secret in secrets:
        assert secret not in listing
        for message in records:
            headers = b"".join(k.encode() + (v or b"") for k, v in message.headers() or [])
            blob = (message.key() or b"") + (message.value() or b"") + headers
            assert secret.encode() not in blob, message.topic()
        for log in logs:
            assert secret not in log.read_text(errors="replace"), log


def test_users_add_again_keeps_acls_in_place_and_moves_a_user_to_another_role(deployment: Settings) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap(deployment), **kafka.probe_auth(deployment)})
    kafka_users.add_user(deployment, "mover", "submitter")
    # The same role again: nothing removed and re-created, so a running process is never denied.
    assert kafka_acl.grant_role(admin, "mover", "submitter", deployment) == (0, 0)
    done = cli(deployment, "infra", "users", "add", "mover", "--role", "sink")
    assert done.returncode == 0, done.stderr
    mover = as_user(deployment, "mover")
    wait_until(  # ACLs reach every node through the metadata log
        lambda: access.missing(mover, "sink") == [],
        15,
        "the sink role's grants to reach every node",
        interval=0.2,
        detail=lambda: f"missing: {[g.describe() for g in access.missing(mover, 'sink')]}",
    )
    lacking = {g.describe() for g in access.missing(mover, "submitter")}
    assert f"WRITE topic '{deployment.commands_topic}'" in lacking


def test_the_sinks_credentials_open_sealed_contents_but_write_no_key(deployment: Settings) -> None:
    """The audit store and the UI open sealed values with the sink's user (analytics.unseal reads
    the keys topic); the sink may not add or destroy a key, and a sink user without READ on the
    keys topic is named at start."""
    run_id = "run-the-sink-opens"
    admin_log = KafkaLog(deployment)
    try:
        admin_keys = KeyStore(admin_log, deployment.keys_topic, deployment.partitions)
        sealed = Sealer(admin_keys).seal_text('"the refund is approved"', "result", run_id)
        key = admin_keys.opening_key(run_id)
    finally:
        admin_log.close()
    sink = as_user(deployment, "sink").model_copy(update={"seal_contents": True})
    assert access.missing(sink, "sink") == []
    opener = Opener.of(sink)  # what `agentlog audit` opens sealed contents with, as the sink's user
    try:
        assert opener.open_value(sealed, "result") == '"the refund is approved"'
    finally:
        opener.close()
    producer = Producer(sink.kafka_common())  # the sink's user, writing a key and a key's tombstone
    errors: list[KafkaError | None] = []
    try:
        for value in (b"k" * 32, None):
            producer.produce(
                sink.keys_topic,
                key=run_id.encode(),
                value=value,
                partition=partition_for(run_id, sink.partitions),
                on_delivery=lambda err, _msg: errors.append(err),
            )
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    reread = KafkaLog(deployment)
    try:
        assert (
            KeyStore(reread, deployment.keys_topic, deployment.partitions).opening_key(run_id) == key
        )  # still there
    finally:
        reread.close()

    # A sink user with the grants of before (no READ on the keys topic) is named by the start check.
    kafka_users.add_user(deployment, "old-sink", "sink")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap(deployment), **kafka.probe_auth(deployment)})
    keys_read = kafka_acl.binding("User:old-sink", Grant("topic", deployment.keys_topic, "READ"))
    dropped = AclBindingFilter(
        keys_read.restype,
        keys_read.name,
        keys_read.resource_pattern_type,
        keys_read.principal,
        keys_read.host,
        keys_read.operation,
        keys_read.permission_type,
    )
    for future in admin.delete_acls([dropped], request_timeout=30).values():
        future.result()
    old = as_user(deployment, "old-sink")
    missing = wait_until(  # ACLs reach every node through the metadata log
        lambda: access.missing(old, "sink"), 15, "the dropped grant to reach every node", interval=0.2
    )
    assert [g.describe() for g in missing] == [f"READ topic '{deployment.keys_topic}'"]
