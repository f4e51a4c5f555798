"""The refund agent's outside world (examples/refund_agent.py) as crash tests see it: a SQLite file
that counts every model call and effect attempt, and the wait for a kill inside step 31."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runtime.client import Client
from runtime.log.records.events import ModelCallScheduled
from support.events import LogReader
from support.wait import wait_until

REFUND_APP = "examples.refund_agent:app"
STEP_31_MODEL_POSITION = 61  # the planner's call of step 31 (two positions a step)


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


def model_calls_at(db: sqlite3.Connection, step: int) -> int:
    return int(db.execute("SELECT COUNT(*) FROM model_calls WHERE step = ?", (step,)).fetchone()[0])


def scheduled_in_log(reader: LogReader, partition: int, run_id: str, position: int) -> bool:
    """Whether the model call's Scheduled record is durable. A model call starts before that record
    is acknowledged (runtime.worker.execution); only once it is is the call in doubt at a crash
    (otherwise the log holds nothing of it and it just runs again)."""
    return any(
        isinstance(e, ModelCallScheduled) and e.run_id == run_id and e.position == position
        for _, e in reader.events(partition)
    )


def wait_inside_step_31(db: sqlite3.Connection, reader: LogReader, client: Client, run_id: str) -> None:
    """Until step 31's model call has started and its Scheduled record is durable: a kill now
    leaves exactly that call in doubt (the worker hangs there with REFUND_HANG_AT_STEP=31)."""
    wait_until(lambda: model_calls_at(db, 31) == 1, 60, "step 31's model call to start")
    partition = client.run(run_id).partition
    wait_until(
        lambda: scheduled_in_log(reader, partition, run_id, STEP_31_MODEL_POSITION),
        30,
        "its Scheduled record",
    )
