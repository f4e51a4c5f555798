"""The end-to-end workload every runtime compared runs: 40 steps, each a call of a scripted model
and a call of a sync tool that commits one SQLite row, as a real tool writes to its own store.

Plain functions, imported by bench/e2e_app.py (agentlog), bench/peers/restate_app.py and
bench/peers/dbos_app.py, so the three run the same model and the same tool; nothing here imports
a runtime. The model is async and never suspends (no weights or network here). The tool blocks
on SQLite, so each runtime runs it off its event loop (agentlog's call pool, the Restate SDK's
executor, DBOS's workflow thread); it commits in WAL mode with ``synchronous=NORMAL`` (no fsync
per commit, the same for all). Rows carry wall times, so a benchmark can place a run's first
model call and last tool call against the client's submit and result (``E2E_DB`` names the file).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

_local = threading.local()
_DB = os.environ.get("E2E_DB", "/tmp/agentlog-e2e.db")
STEPS = 40
# A crash test's process (started with E2E_CRASH_VICTIM=1) never finishes step CRASH_STEP's tool
# call of a run named crash-*: it is killed there, and the fresh process after it runs normally.
CRASH_STEP = 31
_VICTIM = os.environ.get("E2E_CRASH_VICTIM") == "1"


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS tool_calls (run TEXT, step INTEGER, at REAL);
        CREATE TABLE IF NOT EXISTS first_model_calls (run TEXT PRIMARY KEY, at REAL);
        """
    )
    return conn


def _db() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = connect(_DB)
    return conn


async def planner(
    messages: list[dict[str, Any]], run: str = "", step: int = 0, **params: Any
) -> dict[str, Any]:
    if step == 1:  # where the run's first model call starts, for submit -> first call
        _db().execute("INSERT OR IGNORE INTO first_model_calls VALUES (?, ?)", (run, time.time()))
    return {"step": step, "next": "record"}


def record(run: str, step: int) -> dict[str, Any]:
    if _VICTIM and step == CRASH_STEP and run.startswith("crash-"):
        threading.Event().wait()  # until the SIGKILL
    _db().execute("INSERT INTO tool_calls VALUES (?, ?, ?)", (run, step, time.time()))
    return {"step": step, "ok": True}


def crash_run(suffix: str) -> str:
    """The name of a run whose tool call at CRASH_STEP hangs in a victim process."""
    return f"crash-{suffix}"


def steps_done(path: str, run: str) -> int:
    """How many of ``run``'s tool calls committed (a crash test waits for CRASH_STEP - 1)."""
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            found = conn.execute("SELECT COUNT(*) FROM tool_calls WHERE run = ?", (run,)).fetchone()
    except sqlite3.OperationalError:  # the tool has not created its table yet
        return 0
    return int(found[0])
