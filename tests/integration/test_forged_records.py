"""A record no worker wrote is never returned as a run's state or result (issue 40), on real Kafka.

The forger writes straight to the events topic with a plain producer -- what a leaked admin
credential can do on the secure deployment, where ACLs cannot refuse it -- a well-formed
``RunCompleted`` at the right seq and epoch, with a valid-looking link and a signature, made
without the workers' chain key or signing key. Workers run with both keys; the client holds only
the verify key. What is checked: ``Client.result`` and ``status`` name the forgery and return no
forged result; the owner parks a waiting run within seconds; after a run's end, reads and a fresh
worker's rebuild name it; the refund (a SQLite row) is paid once or not at all, never on the forgery.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics.verify import read_only, verify_log
from runtime.client import Client, ForgedRecord, RunError, RunHandle
from runtime.config import Settings
from runtime.log.records.chain import ChainKey, link_of, seal
from runtime.log.records.events import (
    EpochClaimed,
    Event,
    PartitionCheckpoint,
    RunCompleted,
    RunParked,
    SignalReceived,
)
from runtime.log.records.partition_signing import claim_signature
from runtime.log.records.signing import public_text, sign
from runtime.worker.rebuild import checkpoint_key
from support.services import agentlog
from support.sink import EventLog
from support.trust_apps import payments
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

CHAIN_KEY = f"chain-{uuid.uuid4().hex}"
SIGNER = Ed25519PrivateKey.generate()
SIGNING_KEY = base64.b64encode(
    SIGNER.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
).decode()
VERIFY_KEY = public_text(SIGNER)
APP = "support.trust_apps:app"


def _worker(settings: Settings, workers: list[WorkerProcess], tmp_path: Path, name: str) -> WorkerProcess:
    worker = WorkerProcess(
        settings,
        APP,
        name,
        tmp_path / f"{name}.log",
        TEST_COUNTER_DIR=str(tmp_path),
        AGENTLOG_CHAIN_KEY=CHAIN_KEY,
        AGENTLOG_SIGNING_KEY=SIGNING_KEY,
    )
    workers.append(worker)
    worker.wait_ready(settings.partitions)
    return worker


@pytest.fixture
def verifying(deployment: Settings) -> Settings:
    return deployment.model_copy(update={"verify_key": VERIFY_KEY})


@pytest.fixture
def client(verifying: Settings) -> Iterator[Client]:
    with Client(verifying) as client:
        yield client


@pytest.fixture
def forger(deployment: Settings) -> Iterator[EventLog]:
    log = EventLog(deployment)
    yield log
    log.producer.flush(10)
    del log.producer  # its last reference: the librdkafka handle closes now, not at a later collection


def _events(client: Client, run_id: str) -> list[Event]:
    return [e.event for e in client.run(run_id).events()]


def _waiting_refund(client: Client, worker: WorkerProcess, order: str, amount: float) -> RunHandle:
    """An ``approved_refund`` run submitted and started by ``worker``: it waits for its approval."""
    run = client.submit("approved_refund", {"order": order, "amount": amount})
    client.flush()
    wait_until(lambda: _events(client, run.run_id), 30, "the run to start", process=worker.proc)
    return run


def _forge_completion(forger: EventLog, client: Client, run_id: str, result: str) -> str:
    """A RunCompleted after the run's last record: right seq, epoch and worker, a link made with a
    guessed key, a signature made with the forger's own key. Where it landed."""
    last = _events(client, run_id)[-1]
    forged = RunCompleted(
        run_id=run_id,
        seq=last.seq + 1,
        worker=last.worker,
        epoch=last.epoch,
        occurred_at=last.occurred_at + 1,
        result=result,
    )
    value = sign(Ed25519PrivateKey.generate(), run_id.encode(), last.chain, forger.serde.encode(forged))
    value = seal(ChainKey(b"a guess"), run_id.encode(), last.chain, value)
    assert link_of(value) is not None
    partition = forger.partition(run_id)
    offset = forger.append_raw(value, partition, run_id.encode())
    return f"{forger.topic}[{partition}]@{offset} (RunCompleted)"


def test_a_forged_completion_of_a_waiting_run_is_named_and_the_owner_parks_it(
    deployment: Settings,
    client: Client,
    forger: EventLog,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    worker = _worker(deployment, workers, tmp_path, "w1")
    run = _waiting_refund(client, worker, "A-1", 41.6)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(run.result, 30)  # an application waiting for the refund's result
        where = _forge_completion(forger, client, run.run_id, '{"refunded": 4160.0, "forged": true}')
        with pytest.raises(ForgedRecord) as raised:
            waiting.result(timeout=30)
    # Named, with the run's own state (still waiting, or parked by now), and no forged result. The
    # client's tail reads the partition in order: the forgery before the owner's RunParked.
    assert raised.value.forged.startswith(where) and "signature" in raised.value.forged, str(raised.value)
    assert raised.value.status in ("running", "parked") and "4160" not in str(raised.value)
    status = client.run(run.run_id).status()
    assert status.status in ("running", "parked") and status.result is None
    assert any(where in forged for forged in status.forged), status.forged

    parked = wait_until(
        lambda: next((e for e in _events(client, run.run_id) if isinstance(e, RunParked)), None),
        5,
        "the owner to park the run",
        process=worker.proc,
        detail=worker.log_tail,
    )
    assert where in parked.reason, parked.reason
    assert "foreign_record" in worker.log_path.read_text()
    # The approval arrives after: the parked run's real work does not continue.
    run.signal("approve", True)
    printed = agentlog(deployment, "status", run.run_id, "--json", AGENTLOG_VERIFY_KEY=VERIFY_KEY)
    shown = json.loads(printed.stdout)
    assert shown["status"] == "parked" and shown["result"] is None
    assert any(where in forged for forged in shown["forged"]), shown
    with pytest.raises(RunError) as again:
        client.run(run.run_id).result(timeout=10)
    assert again.value.status == "parked" and where in again.value.reason
    assert payments(tmp_path) == []


def test_a_forgery_after_a_run_ended_is_named_by_reads_and_by_a_fresh_workers_rebuild(
    deployment: Settings,
    verifying: Settings,
    client: Client,
    forger: EventLog,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    first = _worker(deployment, workers, tmp_path, "w1")
    run = _waiting_refund(client, first, "B-2", 12.5)
    run.signal("approve", True)
    assert run.result(timeout=30) == {"refunded": 12.5}
    assert len(payments(tmp_path)) == 1
    # An auditor with the public key only (no chain key, nothing that can write) checks the signatures.
    audited = agentlog(deployment, "audit", "verify", run.run_id, AGENTLOG_VERIFY_KEY=VERIFY_KEY)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "2 status records signed by the workers" in audited.stdout, audited.stdout

    # The live owner names one forged after the end (it has no run left to park).
    live = _forge_completion(forger, client, run.run_id, '{"refunded": 1250.0}')
    wait_until(
        lambda: live in first.log_path.read_text(), 5, "the owner to name the forgery", process=first.proc
    )
    # Its own records, read back the same way, are never taken for foreign ones.
    noticed = [line for line in first.log_path.read_text().splitlines() if '"foreign_record"' in line]
    assert len(noticed) == 1 and live.split(" (")[0] in noticed[0], noticed
    first.kill()
    # Forged while no worker owns the partition: the next owner's rebuild reads it.
    last = _events(client, run.run_id)[-1]
    late = SignalReceived(
        run_id=run.run_id,
        seq=last.seq + 1,
        worker="w1",
        epoch=last.epoch,
        name="approve",
        payload="true",
        command_offset=0,
    )
    offset = forger.append_raw(forger.serde.encode(late), forger.partition(run.run_id), run.run_id.encode())
    rebuilt = f"{forger.topic}[{forger.partition(run.run_id)}]@{offset}"

    with Client(verifying) as reader:  # a client that did not submit the run
        handle = reader.run(run.run_id)
        assert handle.result(timeout=10) == {"refunded": 12.5}
        status = handle.status()
        assert status.status == "completed" and status.result == {"refunded": 12.5}
        assert any(live in forged for forged in status.forged), status.forged
        history = handle.history()
        flagged = [e for e in history if "forged" in e]
        assert [e["offset"] for e in flagged] == [int(live.split("@")[1].split()[0]), offset], flagged

    audited = agentlog(deployment, "audit", "verify", run.run_id, AGENTLOG_VERIFY_KEY=VERIFY_KEY)
    assert audited.returncode == 1, audited.stdout + audited.stderr
    assert f"first bad record {live.split(' (')[0]}" in audited.stdout and "forged" in audited.stdout

    second = _worker(deployment, workers, tmp_path, "w2")
    # The rebuild names the run's first record past its end that breaks its chain: the first
    # forgery if w1's last checkpoint did not cover it, else the second.
    named = wait_until(
        lambda: [
            line
            for line in second.log_path.read_text().splitlines()
            if '"foreign_record"' in line and run.run_id in line
        ],
        15,
        "the rebuild to name the forgery",
        process=second.proc,
        detail=second.log_tail,
    )
    assert len(named) == 1 and "chain is broken" in named[0] and '"action": "named"' in named[0]
    assert live.split(" (")[0] in named[0] or rebuilt in named[0], named[0]
    assert len(payments(tmp_path)) == 1  # not re-run: the refund is paid once
    assert not any(isinstance(e, RunParked) for e in _events(client, run.run_id))


def test_a_forged_claim_and_checkpoint_are_named_and_the_owner_keeps_its_partition(
    deployment: Settings,
    verifying: Settings,
    client: Client,
    forger: EventLog,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    first = _worker(deployment, workers, tmp_path, "w1")
    run = _waiting_refund(client, first, "C-3", 7.5)
    partition = forger.partition(run.run_id)
    # What a leaked admin credential can write: a claim with no signature, one signed with the
    # forger's own key, and a checkpoint that says nothing is active (a rebuild trusting it would
    # drop the waiting run).
    unsigned = EpochClaimed(run_id="", partition=partition, worker="thief", occurred_at=1)
    claims = [
        forger.append_raw(forger.serde.encode(claim), partition)
        for claim in (
            unsigned,
            replace(unsigned, signature=claim_signature(Ed25519PrivateKey.generate(), unsigned)),
        )
    ]
    fake = PartitionCheckpoint(
        run_id="", partition=partition, covered_offset=claims[-1] + 1_000_000, commands_offset=0
    )
    forger.producer.produce(
        deployment.checkpoints_topic,
        key=checkpoint_key(partition),
        value=forger.serde.encode(fake),
        partition=partition,
    )
    assert forger.producer.flush(30) == 0

    # The owner's tail names both claims and takes neither for a newer owner: the approval is
    # handled, the refund paid (its effect proves the partition is still ours) -- once.
    named = wait_until(
        lambda: [
            line for line in first.log_path.read_text().splitlines() if '"forged_partition_record"' in line
        ],
        5,
        "the owner to name the forged claims",
        process=first.proc,
        detail=first.log_tail,
    )
    run.signal("approve", True)
    assert run.result(timeout=30) == {"refunded": 7.5}
    named = [line for line in first.log_path.read_text().splitlines() if '"forged_partition_record"' in line]
    assert len(named) == 2 and all("thief" in line for line in named), named
    assert "newer epoch claimed" not in first.log_path.read_text()
    # This scratch deployment lets anyone write (plaintext, no users): the worker said so at start.
    opened = [line for line in first.log_path.read_text().splitlines() if '"deployment_open"' in line]
    assert len(opened) == 1 and "without authentication" in opened[0], opened
    assert len(payments(tmp_path)) == 1
    # A reader with the verify key sees the owner's records after the forged claims; one without
    # it reads them as a fenced zombie's -- what the forgery did before claims were signed.
    status = client.run(run.run_id).status()
    assert status.status == "completed" and status.result == {"refunded": 7.5}
    with Client(deployment) as blind:
        assert blind.run(run.run_id).status().status == "running"
    # `audit verify`'s check, in this process (the CLI's own test is the one above).
    reader = read_only(verifying)
    try:
        verdict = verify_log(reader, run.run_id, "signatures")
    finally:
        reader.close()
    assert verdict.kind == "forged" and verdict.broken_at is not None, verdict
    described = verdict.describe()
    assert f"first bad record {forger.topic}[{partition}]@{claims[0]}" in described, described
    assert "no worker's signature" in described and "fences nothing" in described, described

    # The next owner trusts no forged checkpoint: it reads the history, names it, and does not
    # run the ended run again.
    first.kill()
    second = _worker(deployment, workers, tmp_path, "w2")
    wait_until(
        lambda: "(PartitionCheckpoint)" in second.log_path.read_text(),
        15,
        "the rebuild to name the forged checkpoint",
        process=second.proc,
        detail=second.log_tail,
    )
    checkpoint_lines = [
        line
        for line in second.log_path.read_text().splitlines()
        if '"forged_partition_record"' in line and "(PartitionCheckpoint)" in line
    ]
    assert len(checkpoint_lines) == 1 and "reads the history" in checkpoint_lines[0], checkpoint_lines
    assert len(payments(tmp_path)) == 1  # the ended run is not run again


def test_a_genuine_claim_another_producer_wrote_among_the_owners_records_fences_its_effect(
    deployment: Settings,
    client: Client,
    forger: EventLog,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    # The owner proves its own keyed records by their acks (runtime.log.kafka.proven); a claim is
    # keyless and another producer's: a gap in those acks, which the owner reads before an effect.
    # No chain key: no foreign-record sweep reads the partition meanwhile, only the effect's check.
    worker = WorkerProcess(
        deployment,
        APP,
        "w1",
        tmp_path / "w1.log",
        TEST_COUNTER_DIR=str(tmp_path),
        AGENTLOG_SIGNING_KEY=SIGNING_KEY,
    )
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    run = _waiting_refund(client, worker, "D-4", 9.5)
    partition = forger.partition(run.run_id)
    newer = EpochClaimed(run_id="", partition=partition, worker="w2", occurred_at=1)
    forger.append_raw(
        forger.serde.encode(replace(newer, signature=claim_signature(SIGNER, newer))), partition
    )
    run.signal("approve", True)  # the refund's Scheduled record lands after the newer claim
    lost = wait_until(
        lambda: [line for line in worker.log_path.read_text().splitlines() if '"partition_lost"' in line],
        10,
        "the owner to meet the newer claim before the refund, and let the partition go",
        process=worker.proc,
        detail=worker.log_tail,
    )
    assert len(lost) == 1 and f"fenced: a newer epoch claimed partition {partition}" in lost[0], lost
    assert "a newer epoch claimed it" in worker.log_path.read_text()
    assert payments(tmp_path) == []  # the effect never started
    assert "forged_partition_record" not in worker.log_path.read_text()
