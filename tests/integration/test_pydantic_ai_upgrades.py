"""Upgrading a PydanticAI agent with a run in flight (a run waiting for an approval on Kafka):
changed instructions are drift for ``agentlog upgrade check``, not a park; a renamed tool would
park; the run then finishes on the new code with the refund applied once."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.services import agentlog
from support.wait import wait_for_event
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration


def worker(deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, version: str) -> WorkerProcess:
    started = WorkerProcess(
        deployment,
        f"support.pydantic_ai_apps:app_{version}",
        f"approver-{version}",
        tmp_path / f"{version}.log",
        TEST_COUNTER_DIR=str(tmp_path),
    )
    workers.append(started)
    return started


def test_changed_instructions_are_drift_and_a_renamed_tool_would_park(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    client = Client(deployment)
    v1 = worker(deployment, workers, tmp_path, "v1")
    client.submit("approve", {"order": "A-1"}, run_id="R-1")
    client.flush()
    wait_for_event(client, "R-1", "ModelCallCompleted", count=2)  # looked up; the refund awaits approval
    v1.stop()

    drift = agentlog(deployment, "upgrade", "check", "--app", "support.pydantic_ai_apps:app_v2")
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert "R-1  approve   drift at 1: v1 -> v2; drift at 3: v1 -> v2" in drift.stdout, drift.stdout

    renamed = agentlog(deployment, "upgrade", "check", "--app", "support.pydantic_ai_apps:app_renamed")
    assert renamed.returncode == 1, renamed.stdout + renamed.stderr
    assert "would park at position 2: history holds tool 'approver.lookup'" in renamed.stdout, renamed.stdout
    # the recorded answer names `lookup`, which the new agent lacks: it would ask the model again
    assert "code issues model 'approver.model'" in renamed.stdout

    worker(deployment, workers, tmp_path, "v2")
    client.run("R-1").signal("approval", {"approvals": {"refund-1": True}})
    assert client.run("R-1").result(timeout=60) == {"answer": "refunded A-1"}
    refunds = list(tmp_path.glob("refund-*"))
    assert len(refunds) == 1 and refunds[0].read_text() == "1"
    status = client.run("R-1").status()
    assert status.status == "completed" and status.drift  # the drift is recorded, the run not parked
    client.close()
