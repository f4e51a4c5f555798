"""A sealed run (``seal_contents``) survives a SIGKILL of its worker: the next worker's rebuild
decodes sealed records, and each may need its key read from the keys topic in the middle of the
rebuild's own read of the events topic (runtime.log.kafka.backend lends each read a consumer of
its own; sharing one reassigned it under the rebuild, which then never reached its end)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.reader import read_partition
from support.refund_world import REFUND_APP, wait_inside_step_31, world
from support.services import make_deployment
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_a_sealed_run_killed_at_step_31_is_finished_by_a_fresh_worker(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services).model_copy(update={"seal_contents": True})
    db_path = tmp_path / "world.db"
    db = world(db_path)
    env = {"REFUND_WORLD_DB": str(db_path), "REFUND_HANG_AT_STEP": "31"}
    first = WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1.log", **env)
    workers.append(first)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    run_id = client.submit("refund", {"order": "48211"}).run_id
    client.flush()
    wait_inside_step_31(db, first.reader, client, run_id)
    partition = client.run(run_id).partition
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()

    second = WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1b.log", REFUND_WORLD_DB=str(db_path))
    workers.append(second)
    result = client.run(run_id).result(timeout=60)
    calls = dict(db.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())
    assert [step for step in range(1, 31) if calls[step] != 1] == [], second.log_tail()
    assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 3  # each effect once
    assert len(result["nonces"]) == 40
    # The records are sealed in Kafka: the order number never appears in the clear.
    raw = b"".join(r.value or b"" for r in read_partition(deployment, deployment.events_topic, partition))
    assert b"48211" not in raw and b"sealed:v1:" in raw
    client.close()
