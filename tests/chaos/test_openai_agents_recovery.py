"""An OpenAI Agents SDK run made durable on agentlog, SIGKILLed mid-run on real Kafka.

``support.agents_apps``: a triage agent hands off to a refund agent, which makes two parallel
lookups per step, a refund at step 5, and answers after step 8. Its stateless model and its
refund count what they received in a SQLite world. The worker is killed while step 6's model
request is in flight; a successor with the same identity replays the recorded handoff, the parallel
calls (in their recorded order) and the refund from the log.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import ModelCallScheduled, ToolCallScheduled
from runtime.log.records.prompts import rebuild_inputs
from runtime.run_status import InDoubtCall
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
APP = "support.agents_apps:app"


def requests(db: sqlite3.Connection) -> dict[tuple[str, int], int]:
    rows = db.execute("SELECT agent, step, COUNT(*) FROM model_calls GROUP BY agent, step").fetchall()
    return {(agent, step): count for agent, step, count in rows}


def test_agents_sdk_run_killed_at_step_6_resends_nothing_and_refunds_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    env = {"AGENTS_WORLD_DB": str(tmp_path / "world.db"), "AGENTS_HANG_AT_STEP": "6"}
    first = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log", **env)
    workers.append(first)
    first.wait_ready(deployment.partitions)
    db = sqlite3.connect(env["AGENTS_WORLD_DB"], timeout=30)
    client = Client(deployment)
    run = client.submit("support", {"question": "refund A-1 please"})
    client.flush()

    def step_6_asked() -> bool:
        try:
            return requests(db).get(("refund_agent", 6)) == 1
        except sqlite3.OperationalError:  # the worker has not made the tables yet
            return False

    wait_until(step_6_asked, 90, "step 6's model request", detail=first.log_tail)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    recorded_before = [
        (type(r.event).__name__, getattr(r.event, "tool", ""))
        for r in run.events()
        if isinstance(r.event, ToolCallScheduled)
    ]

    second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", **env)
    workers.append(second)
    result = run.result(timeout=90)

    assert result == {"answer": "refunded after 8 steps", "agent": "refund_agent"}
    calls = requests(db)
    assert calls.pop(("refund_agent", 6)) == 2  # the one request in flight, asked again
    assert calls == {("triage", 0): 1, **{("refund_agent", s): 1 for s in range(1, 10) if s != 6}}, (
        second.log_tail()
    )
    effects = db.execute("SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM effect_attempts").fetchone()
    assert effects == (1, 1) and db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 1
    status = run.status()
    assert status.status == "completed"
    assert status.in_doubt == (
        InDoubtCall(kind="model", position=16, idempotency_key=None, name="support.model"),
    )
    events = [r.event for r in run.events()]
    tools = [(type(e).__name__, e.tool) for e in events if isinstance(e, ToolCallScheduled)]
    assert tools[: len(recorded_before)] == recorded_before  # the successor kept the recorded order
    assert tools[:2] == [
        ("ToolCallScheduled", "support.lookup_order"),
        ("ToolCallScheduled", "support.lookup_customer"),
    ]
    asked = [e for e in events if isinstance(e, ModelCallScheduled)]
    # The params as recorded may refer to entries of the run's message sequence: read them rebuilt.
    inputs = rebuild_inputs(events)
    assert inputs[asked[0].position].params.get("agent") == "triage"
    assert inputs[asked[1].position].params.get("agent") == "refund_agent"
    client.close()
