"""A PydanticAI agent made durable on agentlog, SIGKILLed mid-run on real Kafka.

The agent is ``examples.refund_pydantic_ai``: a plain ``pydantic_ai.Agent`` (a ``FunctionModel``
planner and four tools) with the ``AgentlogDurability`` capability, 40 steps and a final answer
(41 model requests), effects at steps 14, 22 (the refund) and 30. Its world is a SQLite file that
counts every model request the planner received and every effect attempt (the tests' own count,
independent of the log). A worker is killed with SIGKILL; a successor with the same identity
recovers the run from the log.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import ModelCallCompleted
from runtime.run_status import InDoubtCall
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
APP = "examples.refund_pydantic_ai:app"
MODEL_REQUESTS = 41  # one per step and the final answer


def world(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30)
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS model_calls (id INTEGER PRIMARY KEY, step INTEGER, nonce TEXT, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effect_attempts (id INTEGER PRIMARY KEY, kind TEXT, idempotency_key TEXT, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effects (idempotency_key TEXT PRIMARY KEY, kind TEXT, detail TEXT);
        """
    )
    return conn


def requests_per_step(db: sqlite3.Connection) -> dict[int, int]:
    return dict(db.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())


def start(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, **hang: str
) -> tuple[sqlite3.Connection, dict[str, str], WorkerProcess]:
    db_path = tmp_path / "world.db"
    env = {"REFUND_WORLD_DB": str(db_path), **hang}
    worker = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log", **env)
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    return world(db_path), env, worker


def test_pydantic_ai_agent_killed_inside_the_refund_applies_it_once_and_resends_nothing(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db, env, first = start(deployment, workers, tmp_path, REFUND_HANG_IN_EFFECT="refund")
    client = Client(deployment)
    run = client.submit("refund", {"order": "48211"})
    client.flush()
    wait_until(
        lambda: db.execute("SELECT COUNT(*) FROM effects WHERE kind='refund'").fetchone()[0] == 1,
        90,
        "step 22's refund to be applied",
        detail=first.log_tail,
    )
    os.kill(first.proc.pid, signal.SIGKILL)  # the refund is applied, its result not yet recorded
    first.proc.wait()
    before = requests_per_step(db)
    assert sorted(before) == list(range(1, 23)), first.log_tail()

    second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", **env)
    workers.append(second)
    result = run.result(timeout=90)

    calls = requests_per_step(db)
    assert [step for step in range(1, MODEL_REQUESTS + 1) if calls.get(step) != 1] == [], second.log_tail()
    attempts = db.execute("SELECT idempotency_key FROM effect_attempts WHERE kind='refund'").fetchall()
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # re-run once, in doubt, with its key
    assert db.execute("SELECT kind, COUNT(*) FROM effects GROUP BY kind ORDER BY kind").fetchall() == [
        ("create_ticket", 1),
        ("refund", 1),
        ("send_email", 1),
    ]
    assert result["answer"] == "order 48211: 40 steps done" and result["requests"] == MODEL_REQUESTS
    status = run.status()
    assert status.status == "completed"
    # exactly one step in doubt: the refund (positions: model, tool per step; step 22's tool is 44)
    assert status.in_doubt == (
        InDoubtCall(kind="tool", position=44, idempotency_key=attempts[0][0], name="refund.refund"),
    )
    completions = [r.event for r in run.events() if isinstance(r.event, ModelCallCompleted)]
    assert len(completions) == MODEL_REQUESTS
    assert all(c.input_tokens and c.output_tokens for c in completions)  # usage reaches the record
    client.close()


def test_pydantic_ai_agent_killed_at_step_31_replays_30_steps_without_a_model_request(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db, env, first = start(deployment, workers, tmp_path, REFUND_HANG_AT_STEP="31")
    client = Client(deployment)
    run = client.submit("refund", {"order": "48211"})
    client.flush()
    wait_until(
        lambda: requests_per_step(db).get(31) == 1, 90, "step 31's model request", detail=first.log_tail
    )
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    first_nonces = [row[0] for row in db.execute("SELECT nonce FROM model_calls ORDER BY id")]

    second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", **env)
    workers.append(second)
    result = run.result(timeout=90)

    calls = requests_per_step(db)
    assert [step for step in range(1, 31) if calls[step] != 1] == [], second.log_tail()
    assert calls[31] == 2 and all(calls[step] == 1 for step in range(32, MODEL_REQUESTS + 1))
    assert db.execute("SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM effect_attempts").fetchone() == (
        3,
        3,
    )
    assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 3
    assert result["nonces"][:30] == first_nonces[:30]  # the recorded responses were served
    assert result["nonces"][30] != first_nonces[30]  # step 31 was asked again
    status = run.status()
    assert status.in_doubt == (
        InDoubtCall(kind="model", position=61, idempotency_key=None, name="refund.model"),
    )
    client.close()
