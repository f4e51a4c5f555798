"""On real Kafka: a run waiting behind the traffic of ended runs gets a history snapshot, a rebuild
starts at the latest checkpoint and ends in the state a full read gives, and the successor worker
completes the run from its snapshot with its effect applied once."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.topics import ensure_topics
from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.schemas.serde import Serde
from runtime.worker.rebuild import CheckpointRead, rebuild
from support.events import LogReader
from support.rebuilds import full_read, partition_taken, state_of, vouched_snapshot, without_checkpoints
from support.services import make_deployment
from support.wait import wait_for_event, wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration

LAG = "40"  # records behind a checkpoint before a run gets a snapshot


def test_a_rebuild_takes_the_waiting_run_from_its_snapshot_and_equals_a_full_read(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=1)
    ensure_topics(without_checkpoints(deployment))  # the empty checkpoints topic a full read sees
    first = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    first.wait_ready(1)
    client = Client(deployment)
    waiting = client.submit("charge_on_signal", {"account": "acct-1"}).run_id
    wait_for_event(client, waiting, "ToolCallCompleted")
    serde = Serde(deployment)
    log = KafkaLog(deployment)
    reader = LogReader(deployment)
    ended = 0

    def traffic_until_vouched() -> CheckpointRead | None:
        """Five more short runs, ended; then the checkpoints, once the latest one vouches for the
        waiting run's snapshot (the run waits while the traffic flows)."""
        nonlocal ended
        for run_id in [
            client.submit("short", {"order": f"o{ended + i}", "steps": 3}).run_id for i in range(5)
        ]:
            client.run(run_id).result(timeout=60)
        ended += 5
        return vouched_snapshot(deployment, serde, log, 0, waiting, 0)

    try:
        wait_until(
            traffic_until_vouched,
            60,
            "a checkpoint vouching for the waiting run's snapshot",
            interval=0.2,
            process=first.proc,
            detail=first.log_tail,
        )
        written = reader.end(0)
        read = wait_until(
            lambda: vouched_snapshot(deployment, serde, log, 0, waiting, written),
            30,
            "a checkpoint covering all the traffic, still vouching for the snapshot",
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
    assert rebuilt.snapshots == {
        waiting: (read.vouched()[waiting], 3)
    }  # RunStarted, lookup Scheduled, Completed
    assert rebuilt.records_read == end - read.checkpoint.covered_offset  # nothing below the checkpoint
    assert full.records_read == end > ended * 8
    assert state_of(rebuilt) == state_of(full)

    second = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    second.wait_ready(1)
    taken = wait_until(
        lambda: partition_taken(second), 30, "the partition_taken line", detail=second.log_tail
    )
    # The run waits on its signal at the checkpoint: indexed without replay (runtime.worker.run_cache).
    assert taken["from_snapshots"] == 1 and taken["active_runs"] == 0 and taken["indexed_waiting"] == 1
    client.run(waiting).signal("go", "approved")
    assert client.run(waiting).result(timeout=30) == "charged"
    charges = (tmp_path / "charge-attempts").read_text().splitlines()
    assert len(charges) == 1 and str(second.proc.pid) in charges[0]  # the effect, once
    types = [e["type"] for e in client.run(waiting).history()]
    assert types.count("ToolCallCompleted") == 2 and types.count("SignalReceived") == 1
    client.close()
