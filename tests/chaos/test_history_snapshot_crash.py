"""A worker SIGKILLed right after it wrote a waiting run's history snapshot, with other runs in
flight: its successor rebuilds from the snapshot and completes the waiting run exactly once."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.kafka.reader import read_partition
from runtime.log.schemas.serde import Serde
from runtime.worker.rebuild import rebuild
from runtime.worker.snapshots import snapshot_key
from support.events import LogReader
from support.services import make_deployment
from support.wait import wait_for_event, wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

LAG = "40"


def test_a_worker_killed_right_after_a_snapshot_leaves_the_waiting_run_to_complete_once(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=1)
    first = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    first.wait_ready(1)
    client = Client(deployment)
    reader = LogReader(deployment)
    waiting = client.submit("charge_on_signal", {"account": "acct-9"}).run_id
    wait_for_event(client, waiting, "ToolCallCompleted")
    wait_until(
        lambda: any(waiting in c.active_runs for c in reader.checkpoints(0)),
        30,
        "a checkpoint listing the waiting run",
        process=first.proc,
        detail=first.log_tail,
    )
    # Traffic that keeps flowing until the kill: the snapshot is written, and the worker dies, with
    # other runs in flight.
    traffic: list[str] = []
    killed = threading.Event()

    def submit_traffic() -> None:
        submitter = Client(deployment)
        try:
            while not killed.is_set() and len(traffic) < 1_000:
                start = len(traffic)
                batch = [
                    submitter.submit("short", {"order": f"o{start + i}", "steps": 3}).run_id
                    for i in range(10)
                ]
                traffic.extend(batch)
                submitter.flush()
                killed.wait(0.05)  # pacing of a steady producer, not a wait for an outcome
        finally:
            submitter.close()

    producer = threading.Thread(target=submit_traffic, name="traffic")
    producer.start()

    key = snapshot_key(waiting)

    def snapshot_written() -> bool:
        return any(
            record.value is not None
            for record in read_partition(
                deployment, deployment.checkpoints_topic, 0, consumer=reader.consumer, keep=lambda k: k == key
            )
        )

    wait_until(
        snapshot_written,
        60,
        "the waiting run's snapshot",
        interval=0.005,
        process=first.proc,
        detail=first.log_tail,
    )
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    killed.set()
    producer.join(timeout=30)
    reader.close()

    second = start_worker(deployment, workers, tmp_path, AGENTLOG_RUN_SNAPSHOT_LAG=LAG)
    epoch = second.wait_ready(1)[0]
    # What the successor's takeover read: the same rebuild, run again up to its claim (a read only).
    log = KafkaLog(deployment)
    try:
        rebuilt = rebuild(deployment, Serde(deployment), log, 0, epoch)
    finally:
        log.close()
    assert waiting in rebuilt.snapshots and (waiting in rebuilt.active or waiting in rebuilt.waiting)
    assert [client.run(run_id).result(timeout=60) for run_id in traffic] == [
        f"o{i}" for i in range(len(traffic))
    ]
    client.run(waiting).signal("go", "approved")
    assert client.run(waiting).result(timeout=30) == "charged"
    assert len((tmp_path / "charge-attempts").read_text().splitlines()) == 1  # the effect, once
    types = [e["type"] for e in client.run(waiting).history()]
    assert types.count("RunStarted") == 1 and types.count("SignalReceived") == 1
    assert types.count("ToolCallScheduled") == 2 and types[-1] == "RunCompleted"
    client.close()
