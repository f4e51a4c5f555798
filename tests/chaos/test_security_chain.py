"""The runs' hash chain against forgery, on real Kafka, registry and chDB (runtime.log.records.chain).

A record produced straight to the events topic by someone without the workers' chain key -- an
admin, or any principal that may write there -- is named by ``agentlog audit verify``, and a
worker taking the partition over (after the owner is SIGKILLed) parks the run with the reason
instead of replaying it. A row altered in the ClickHouse store is named by ``--from-store``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from analytics.store import open_client, parse_dsn
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.chain import LINK_SIZE
from runtime.log.records.events import RunCompleted, RunParked, SignalReceived, ToolCallCompleted
from support.sink import EventLog, InProcessSink, agentlog
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

KEY = "test-chain-key-not-a-secret"


def _run_records(settings: Settings, run_id: str) -> list[tuple[int, object]]:
    client = Client(settings)
    try:
        return [(e.offset, e.event) for e in client.events(run_id)]
    finally:
        client.close()


def test_a_forged_record_is_named_by_verify_and_parks_the_run_on_takeover(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    first = start_worker(deployment, workers, tmp_path, "w1", AGENTLOG_CHAIN_KEY=KEY)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    run_id = client.submit("waiter", {})
    client.flush()
    wait_until(lambda: len(_run_records(deployment, run_id)) >= 1, 30, "the run to start", process=first.proc)
    assert agentlog(deployment, "audit", "verify", run_id, AGENTLOG_CHAIN_KEY=KEY).returncode == 0

    # The forger writes the signal the run waits for, well-formed, at the right seq and epoch --
    # and with a link, made without the key.
    (_, last), *_ = reversed(_run_records(deployment, run_id))
    assert last.chain and len(last.chain) == LINK_SIZE
    log = EventLog(deployment)
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
    assert where in verified.stdout and "SignalReceived" in verified.stdout and "added or altered" in verified.stdout
    unkeyed = agentlog(deployment, "audit", "verify", run_id)
    assert unkeyed.returncode != 0 and "AGENTLOG_CHAIN_KEY" in unkeyed.stderr

    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    second = start_worker(deployment, workers, tmp_path, "w2", AGENTLOG_CHAIN_KEY=KEY)
    second.wait_ready(deployment.partitions)
    parked = wait_until(
        lambda: next((e for _, e in _run_records(deployment, run_id) if isinstance(e, RunParked)), None),
        30,
        "the run to be parked",
        process=second.proc,
        detail=second.log_tail,
    )
    assert where in parked.reason and "chain is broken" in parked.reason, parked.reason
    assert not any(isinstance(e, RunCompleted) for _, e in _run_records(deployment, run_id))
    # The park itself extends the genuine chain: the forged record is the only bad one.
    after = agentlog(deployment, "audit", "verify", run_id, AGENTLOG_CHAIN_KEY=KEY)
    assert where in after.stdout
    client.close()


def test_a_row_altered_in_the_store_is_named_by_verify_from_store(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = start_worker(deployment, workers, tmp_path, "w1", AGENTLOG_CHAIN_KEY=KEY)
    worker.wait_ready(deployment.partitions)
    client = Client(deployment)
    run_id = client.submit("short", {"order": "48211"})
    client.flush()
    client.result(run_id, timeout=60)
    records = _run_records(deployment, run_id)
    dsn = f"chdb://{tmp_path}/store"
    with InProcessSink(deployment, dsn):
        wait_until(
            lambda: agentlog(deployment, "audit", "run", run_id, "--dsn", dsn, "--json").stdout.count('"seq"')
            >= len(records),
            60,
            "the sink to store the run",
        )
    good = agentlog(deployment, "audit", "verify", run_id, "--from-store", "--dsn", dsn, AGENTLOG_CHAIN_KEY=KEY)
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
    bad = agentlog(deployment, "audit", "verify", run_id, "--from-store", "--dsn", dsn, AGENTLOG_CHAIN_KEY=KEY)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "kafka: " in bad.stdout and "chain verified" in bad.stdout.splitlines()[0]  # Kafka still holds the truth
    assert f"@{offset} (seq {target.seq}, ToolCallCompleted): added or altered" in bad.stdout
    client.close()
