"""Compensations on the real services: a failed saga and a cancelled one, run by a worker
subprocess; what `agentlog status` prints and what the audit store (the sink's ClickHouse) holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.services import agentlog
from support.sink import SinkProcess, query
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

APP = "support.ops_apps:app"


def _ended(client: Client, run_id: str) -> str:
    return wait_until(
        lambda: (s := client.run(run_id).status().status) not in ("running", "unknown") and s,
        60,
        f"run {run_id} to end",
    )


def test_failed_and_cancelled_sagas_show_their_compensations_in_status_and_the_audit_store(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log", TEST_COUNTER_DIR=str(tmp_path))
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    dsn = f"chdb://{tmp_path / 'analytics'}"
    client = Client(deployment)
    sink = SinkProcess(deployment, dsn, tmp_path / "sink.log")
    try:
        failed = client.submit("refund_saga", {"order": "F-1"}).run_id
        cancelled = client.submit("refund_saga_waits", {"order": "C-1"}).run_id
        assert _ended(client, failed) == "failed"
        wait_until(
            lambda: [e["type"] for e in client.run(cancelled).history()].count("ToolCallCompleted") == 2,
            60,
            "the cancelled saga's two effects",
        )
        client.run(cancelled).cancel(reason="the customer withdrew")
        assert _ended(client, cancelled) == "cancelled"

        for run_id in (failed, cancelled):
            shown = agentlog(deployment, "status", run_id, "--json")
            assert shown.returncode == 0, shown.stderr
            compensations = json.loads(shown.stdout)["compensations"]
            assert [(c["tool"], c["compensates"], c["state"]) for c in compensations] == [
                ("release_stock", 2, "completed"),
                ("reverse_refund", 1, "completed"),
            ]
            text = agentlog(deployment, "status", run_id).stdout
            assert (
                "compensation  'release_stock' at position" in text and "undoes position 2: completed" in text
            )
        assert client.run(cancelled).status().reason == "the customer withdrew"

        sql = (
            "SELECT run_id, tool, compensates FROM agentlog.events WHERE type = 'ToolCallScheduled' "
            "AND compensates IS NOT NULL ORDER BY run_id, seq"
        )

        def compensations_stored() -> list[tuple[object, ...]]:
            try:
                found = query(dsn, sql).rows
            except Exception:  # the store may not exist or be migrated yet
                return []
            return found if len(found) >= 4 else []

        rows = wait_until(compensations_stored, 60, "the compensations in the audit store", process=sink.proc)
        assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(
            [(run, "release_stock", 2) for run in (failed, cancelled)]
            + [(run, "reverse_refund", 1) for run in (failed, cancelled)]
        )
    finally:
        client.close()
        sink.stop()
