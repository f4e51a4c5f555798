"""The runs' hash chain against forgery, on real Kafka, registry and chDB (runtime.log.records.chain).

A record produced straight to the events topic by someone without the workers' chain key -- the
admin principal, the one that may write there besides the workers -- is named by ``agentlog audit
verify``, and a worker taking the partition over (after the owner is SIGKILLed) parks the run with
the reason instead of replaying it. A row altered in the ClickHouse store is named by
``--from-store``. Neither the chain key nor a password shows in a record, a log line or the
process listing of a chained run.

On the table's 3-node secure cluster (support.secure_cluster, shared with test_security_acl.py):
workers run as ``agentlog-worker``, runs are submitted as ``agentlog-submitter``, the sink reads
as ``agentlog-sink``; the admin forges, reads the log and verifies.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics.store import open_client, parse_dsn
from infra import kafka, kafka_auth, kafka_users
from infra.deployment import scratch_deployment
from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.log.port.partitioning import partition_for
from runtime.log.records.chain import LINK_SIZE
from runtime.log.records.events import (
    EpochClaimed,
    RunCompleted,
    RunParked,
    SignalReceived,
    ToolCallCompleted,
)
from runtime.log.records.signing import public_text
from support.secure_cluster import ADMIN_PASSWORD, as_user
from support.sink import EventLog, SinkProcess, agentlog, read_partition
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

KEY = f"chain-{uuid.uuid4().hex}"  # unique: finding it anywhere is a leak, not a coincidence
WORKER, SUBMITTER, SINK = "agentlog-worker", "agentlog-submitter", "agentlog-sink"


@pytest.fixture
def deployment(secure_cluster: Settings) -> Settings:
    """Fresh topics (3 partitions) on the secure cluster, made as the admin, and the role users
    of ``infra up --secure`` granted on them (infra.kafka_users)."""
    settings = scratch_deployment(secure_cluster, partitions=3)
    kafka_users.ensure_default_users(settings)
    return settings


def _run_records(settings: Settings, run_id: str) -> list[tuple[int, object]]:
    client = Client(settings)
    try:
        return [(e.offset, e.event) for e in client.run(run_id).events()]
    finally:
        client.close()


def test_a_forged_record_is_named_by_verify_and_parks_the_run_on_takeover(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = as_user(deployment, WORKER)
    first = start_worker(worker, workers, tmp_path, "w1", AGENTLOG_CHAIN_KEY=KEY)
    first.wait_ready(deployment.partitions)
    client = Client(as_user(deployment, SUBMITTER))
    run_id = client.submit("waiter", {}).run_id
    client.flush()
    wait_until(lambda: len(_run_records(deployment, run_id)) >= 1, 30, "the run to start", process=first.proc)
    assert agentlog(deployment, "audit", "verify", run_id, AGENTLOG_CHAIN_KEY=KEY).returncode == 0

    # The forger writes the signal the run waits for, well-formed, at the right seq and epoch --
    # and with a link, made without the key.
    (_, last), *_ = reversed(_run_records(deployment, run_id))
    assert last.chain and len(last.chain) == LINK_SIZE
    log = EventLog(deployment)  # the admin: may write anywhere, holds no chain key
    forged = SignalReceived(
        run_id=run_id,
        seq=last.seq + 1,
        worker=last.worker,
        epoch=last.epoch,
        occurred_at=last.occurred_at + 1,
        name="go",
        payload='"forged approval"',
        command_offset=0,
    )
    value = log.serde.encode(forged)
    value = value[:-1] + bytes((LINK_SIZE * 2,)) + b"\x5a" * LINK_SIZE
    forged_offset = log.append_raw(value, log.partition(run_id), run_id.encode())
    where = f"{deployment.events_topic}[{log.partition(run_id)}]@{forged_offset}"

    verified = agentlog(deployment, "audit", "verify", run_id, AGENTLOG_CHAIN_KEY=KEY)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert (
        where in verified.stdout
        and "SignalReceived" in verified.stdout
        and "added or altered" in verified.stdout
    )
    unkeyed = agentlog(deployment, "audit", "verify", run_id)
    assert unkeyed.returncode != 0 and "AGENTLOG_CHAIN_KEY" in unkeyed.stderr

    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    second = start_worker(worker, workers, tmp_path, "w2", AGENTLOG_CHAIN_KEY=KEY)
    second.wait_ready(deployment.partitions)
    parked = wait_until(
        lambda: next((e for _, e in _run_records(deployment, run_id) if isinstance(e, RunParked)), None),
        30,
        "the run to be parked",
        process=second.proc,
        detail=second.log_tail,
    )
    # Parked by the live owner, which noticed a record it did not write (runtime.worker.foreign), or
    # by the worker that took the partition over, which found the chain broken.
    assert where in parked.reason and (
        "chain is broken" in parked.reason or "no worker wrote" in parked.reason
    ), parked.reason
    assert not any(isinstance(e, RunCompleted) for _, e in _run_records(deployment, run_id))
    # The park itself extends the genuine chain: the forged record is the only bad one.
    after = agentlog(deployment, "audit", "verify", run_id, AGENTLOG_CHAIN_KEY=KEY)
    assert where in after.stdout
    client.close()


def test_a_row_altered_in_the_store_is_named_by_verify_from_store_and_no_secret_leaks(
    deployment: Settings, secure_cluster: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = start_worker(as_user(deployment, WORKER), workers, tmp_path, "w1", AGENTLOG_CHAIN_KEY=KEY)
    worker.wait_ready(deployment.partitions)
    dsn = f"chdb://{tmp_path}/store"
    sink = SinkProcess(as_user(deployment, SINK), dsn, tmp_path / "sink.log")
    try:
        with Client(as_user(deployment, SUBMITTER)) as client:
            run_id = client.submit("short", {"order": "48211"}).run_id
            client.run(run_id).result(timeout=60)
        records = _run_records(deployment, run_id)
        wait_until(
            lambda: (
                agentlog(deployment, "audit", "run", run_id, "--dsn", dsn, "--json").stdout.count('"seq"')
                >= len(records)
            ),
            60,
            "the sink to store the run",
            process=sink.proc,
        )
        # While the chained run's worker and sink are up, with the key and passwords in their settings.
        listing = subprocess.run(
            ["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        sink.stop()
    good = agentlog(
        deployment, "audit", "verify", run_id, "--from-store", "--dsn", dsn, AGENTLOG_CHAIN_KEY=KEY
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"store: run {run_id}: {len(records)} records, chain verified" in good.stdout

    offset, target = next((o, e) for o, e in records if isinstance(e, ToolCallCompleted))
    vandal = open_client(parse_dsn(dsn))
    try:
        vandal.command(
            "ALTER TABLE agentlog.events UPDATE result = '\"refund approved\"' "
            f"WHERE run_id = '{run_id}' AND offset = {offset} SETTINGS mutations_sync = 1"
        )
    finally:
        vandal.close()
    bad = agentlog(
        deployment, "audit", "verify", run_id, "--from-store", "--dsn", dsn, AGENTLOG_CHAIN_KEY=KEY
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert (
        "kafka: " in bad.stdout and "chain verified" in bad.stdout.splitlines()[0]
    )  # Kafka still holds the truth
    assert f"@{offset} (seq {target.seq}, ToolCallCompleted): added or altered" in bad.stdout

    secrets = {
        "the chain key": KEY,
        "the admin's password": ADMIN_PASSWORD,
        "the nodes' password": kafka_auth.broker_password(kafka.cluster_home(secure_cluster)),
        **{
            f"{u}'s password": as_user(deployment, u).kafka["sasl.password"]
            for u in (WORKER, SUBMITTER, SINK)
        },
    }
    topics = (deployment.commands_topic, deployment.events_topic, deployment.checkpoints_topic)
    messages = [
        m
        for topic in topics
        for p in range(deployment.partitions)
        for m in read_partition(deployment, p, topic)
    ]
    assert len(messages) > len(records) > 0
    logs = [worker.log_path, tmp_path / "sink.log", *(n.log_path for n in kafka.nodes(secure_cluster))]
    outputs = good.stdout + good.stderr + bad.stdout + bad.stderr
    for what, secret in secrets.items():
        assert secret not in listing, f"{what} in the process listing"
        assert secret not in outputs, f"{what} in audit verify's output"
        for message in messages:
            headers = b"".join(k.encode() + (v or b"") for k, v in message.headers() or [])
            blob = (message.key() or b"") + (message.value() or b"") + headers
            assert secret.encode() not in blob, f"{what} in a record of {message.topic()}"
        for log in logs:
            assert secret not in log.read_text(errors="replace"), f"{what} in {log}"
    vandal_rows = open_client(parse_dsn(dsn))
    try:
        stored = vandal_rows.query(f"SELECT * FROM agentlog.events WHERE run_id = '{run_id}'").result_rows
    finally:
        vandal_rows.close()
    assert stored and not any(secret in repr(stored) for secret in secrets.values()), (
        "a secret in a stored row"
    )


def test_an_auditor_verifies_read_only_and_a_client_names_an_admins_forgery(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 40: with the workers' signing key, a RunCompleted the admin forges on a waiting run is
    named by the submitter's client (never returned), the owner parks the run, and the sink's
    read-only user verifies the run with the public key alone (no chain key, no write permission)."""
    signer = Ed25519PrivateKey.generate()
    raw = signer.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    verify_key = public_text(signer)
    worker = start_worker(
        as_user(deployment, WORKER),
        workers,
        tmp_path,
        "w1",
        AGENTLOG_CHAIN_KEY=KEY,
        AGENTLOG_SIGNING_KEY=base64.b64encode(raw).decode(),
    )
    worker.wait_ready(deployment.partitions)
    submitter = as_user(deployment, SUBMITTER).model_copy(update={"verify_key": verify_key})
    with Client(submitter) as client:
        run_id = client.submit("waiter", {}).run_id
        client.flush()
        wait_until(lambda: _run_records(deployment, run_id), 30, "the run to start", process=worker.proc)
        clean = agentlog(as_user(deployment, SINK), "audit", "verify", run_id, AGENTLOG_VERIFY_KEY=verify_key)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "1 status records signed by the workers" in clean.stdout

        (_, last), *_ = reversed(_run_records(deployment, run_id))
        log = EventLog(deployment)  # the admin: may write anywhere, holds neither key
        forged = RunCompleted(
            run_id=run_id, seq=last.seq + 1, worker=last.worker, epoch=last.epoch, result='{"forged": true}'
        )
        value = log.serde.encode(forged)
        value = value[:-1] + bytes((LINK_SIZE * 2,)) + b"\x5a" * LINK_SIZE
        offset = log.append_raw(value, log.partition(run_id), run_id.encode())
        del log.producer
        where = f"{deployment.events_topic}[{log.partition(run_id)}]@{offset}"
        with pytest.raises(RunError) as raised:
            client.run(run_id).result(timeout=30)
        assert where in str(raised.value) and "true" not in str(raised.value)
        status = client.run(run_id).status()
        assert status.result is None and any(where in f for f in status.forged), status
    wait_until(
        lambda: any(
            isinstance(e, RunParked) and where in e.reason for _, e in _run_records(deployment, run_id)
        ),
        5,
        "the owner to park the run",
        process=worker.proc,
        detail=worker.log_tail,
    )
    audited = agentlog(as_user(deployment, SINK), "audit", "verify", run_id, AGENTLOG_VERIFY_KEY=verify_key)
    assert audited.returncode == 1, audited.stdout + audited.stderr
    assert f"first bad record {where}" in audited.stdout and "forged" in audited.stdout

    # A claim the admin forges (no worker's signature) takes nothing: the owner names it, keeps the
    # partition and runs the next run there to its end; a reader with the public key is not fenced.
    partition = partition_for(run_id, deployment.partitions)
    log = EventLog(deployment)
    claim = EpochClaimed(run_id="", partition=partition, worker="admin", occurred_at=1)
    log.append_raw(log.serde.encode(claim), partition)
    del log.producer
    wait_until(
        lambda: '"forged_partition_record"' in worker.log_path.read_text(),
        5,
        "the owner to name the forged claim",
        process=worker.proc,
        detail=worker.log_tail,
    )
    next_id = next(
        f"{run_id}-{n}"
        for n in range(100)
        if partition_for(f"{run_id}-{n}", deployment.partitions) == partition
    )
    with Client(submitter) as client:
        assert client.submit("short", {"order": "7"}, run_id=next_id).result(timeout=30) == "7"
    assert "newer epoch claimed" not in worker.log_path.read_text()
    # Role users, TLS and ACLs: the worker did not call this deployment open.
    assert '"deployment_open"' not in worker.log_path.read_text()
