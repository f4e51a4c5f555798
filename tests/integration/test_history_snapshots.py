"""On real Kafka: a run waiting behind the traffic of ended runs gets a history snapshot, a rebuild
starts at the latest checkpoint and ends in the state a full read gives, and the successor worker
completes the run from its snapshot with its effect applied once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.topics import ensure_topics
from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka import KafkaLog
from runtime.log.serde import Serde
from runtime.worker.rebuild import rebuild
from support.events import LogReader
from support.rebuilds import full_read, state_of, vouched_snapshot, without_checkpoints
from support.services import make_deployment
from support.wait import wait_for_event, wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration

LAG = "40"  # records behind a checkpoint before a run gets a snapshot


def partition_taken(worker: WorkerProcess) -> dict[str, object] | None:
    """The worker's ``partition_taken`` log line, once written."""
    for line in worker.log_path.read_text(errors="replace").splitlines():
        start = line.find('{"event": "partition_taken"')
        if start >= 0:
            taken: dict[str, object] = json.loads(line[start:])
            return taken
    return None


def test_a_rebuild_takes_the_waiting_run_from_its_snapshot_and_equals_a_full_read(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=1)
    ensure_topics(without_checkpoints(deployment))  # the empty checkpoints topic a full read sees
    first = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    first.wait_ready(1)
    client = Client(deployment)
    waiting = client.submit("charge_on_signal", {"account": "acct-1"})
    wait_for_event(client, waiting, "ToolCallCompleted")
    for run_id in [client.submit("short", {"order": f"o{i}", "steps": 3}) for i in range(15)]:
        client.result(run_id, timeout=60)

    serde = Serde(deployment)
    log = KafkaLog(deployment)
    reader = LogReader(deployment)
    try:
        written = reader.end(0)
        read = wait_until(
            lambda: vouched_snapshot(deployment, serde, log, 0, waiting, written),
            30,
            "a checkpoint covering the traffic and vouching for the waiting run's snapshot",
            process=first.proc,
            detail=first.log_tail,
        )
        assert read.checkpoint is not None and list(read.checkpoint.active_runs) == [waiting]
        first.stop()  # a clean stop: nothing more is appended
        end = reader.end(0)
        rebuilt = rebuild(deployment, serde, log, 0, end)
        full = full_read(deployment, serde, log, 0, end)
    finally:
        log.close()
        reader.close()
    assert rebuilt.snapshots == {waiting: (read.vouched()[waiting], 3)}  # RunStarted, lookup Scheduled, Completed
    assert rebuilt.records_read == end - read.checkpoint.covered_offset  # nothing below the checkpoint
    assert full.records_read == end > 15 * 8
    assert state_of(rebuilt) == state_of(full)

    second = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    second.wait_ready(1)
    taken = wait_until(lambda: partition_taken(second), 30, "the partition_taken line", detail=second.log_tail)
    assert taken["from_snapshots"] == 1 and taken["active_runs"] == 1
    client.signal(waiting, "go", "approved")
    assert client.result(waiting, timeout=30) == "charged"
    charges = (tmp_path / "charge-attempts").read_text().splitlines()
    assert len(charges) == 1 and str(second.proc.pid) in charges[0]  # the effect, once
    types = [e["type"] for e in client.history(waiting)]
    assert types.count("ToolCallCompleted") == 2 and types.count("SignalReceived") == 1
    client.close()
