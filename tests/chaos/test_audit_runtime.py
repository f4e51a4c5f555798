"""The sink and `agentlog audit` on events a real runtime worker wrote.

The refund agent's worker is SIGKILLed inside the refund (after the effect, before its result
is recorded) and a new worker re-executes it with the same key. ClickHouse must tell the same
story as `agentlog history`, and show the refund as one effect that was in doubt.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.sink import SinkProcess, agentlog, kafka_offsets, query, wait_for_rows
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_audit_tells_the_same_story_as_history_for_runtime_events(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db = tmp_path / "world.db"
    env = {"REFUND_WORLD_DB": str(db), "REFUND_HANG_IN_EFFECT": "refund", "TEST_COUNTER_DIR": str(tmp_path)}
    first = WorkerProcess(deployment, "examples.refund_agent:app", "w1", tmp_path / "w1.log", **env)
    workers.append(first)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    refund_run = client.submit("refund", {"order": "48211", "steps": 23}).run_id
    client.flush()
    hang = tmp_path / "world.db.hang-IN_EFFECT-refund"  # the scripted refund is under way
    wait_until(hang.exists, 60, "the refund to start", process=first.proc, detail=first.log_tail)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    workers.append(WorkerProcess(deployment, "examples.refund_agent:app", "w1", tmp_path / "w1b.log", **env))
    client.run(refund_run).result(timeout=60)

    dsn = f"chdb://{tmp_path / 'store'}"
    sink = SinkProcess(deployment, dsn, tmp_path / "sink.log")
    try:
        records = sum(len(offsets) for offsets in kafka_offsets(deployment).values())
        wait_for_rows(dsn, deployment.events_topic, records, proc=sink.proc)
        audited = agentlog(deployment, "audit", "run", refund_run, "--json", "--dsn", dsn)
        assert audited.returncode == 0, audited.stderr
        history = agentlog(deployment, "history", refund_run, "--json")
        assert history.returncode == 0, history.stderr
        common = ("seq", "type", "offset", "epoch", "worker")
        audit_events, history_events = json.loads(audited.stdout), json.loads(history.stdout)
        assert [{k: e[k] for k in common} for e in audit_events] == [
            {k: e[k] for k in common} for e in history_events
        ]
        assert len(history_events) == client.run(refund_run).status().events

        tools = json.loads(
            agentlog(deployment, "audit", "tools", "--tool", "refund", "--json", "--dsn", dsn).stdout
        )
        key = client.run(refund_run).status().in_doubt[0].idempotency_key
        refund_rows = [row for row in tools if row["idempotency_key"] == key]
        assert len(refund_rows) == 1, tools  # one effect, visible at once with its attempts
        row = refund_rows[0]
        assert (row["scheduled"], row["completions"], row["in_doubt"], row["duplicate"]) == (
            1,
            1,
            True,
            False,
        )

        status = query(
            dsn, "SELECT status FROM agentlog.runs WHERE run_id = {r:String}", {"r": refund_run}
        ).rows
        assert status == [["completed"]]
    finally:
        sink.stop()
        client.close()
