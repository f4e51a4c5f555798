"""The end-to-end benchmark's agent: 40 steps, each a model call and a tool call that commits one
SQLite row, as a real tool writes to its own store.

The model is scripted (async, no I/O: no weights or network here). The tool is sync -- it blocks
on SQLite, so it runs in the worker's call pool -- and commits one row per call in WAL mode with
``synchronous=NORMAL`` (no fsync per commit; the same setting for every runtime compared). Rows
carry wall times so the benchmark can place the first model call and the last tool call of a run
against the client's submit and result (``E2E_DB`` names the file).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from runtime import App, Context

app = App("e2e-bench")
_local = threading.local()
_DB = os.environ.get("E2E_DB", "/tmp/agentlog-e2e.db")
STEPS = 40


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


@app.model("planner")
async def planner(
    messages: list[dict[str, Any]], run: str = "", step: int = 0, **params: Any
) -> dict[str, Any]:
    if step == 1:  # where the run's first model call starts, for submit -> first call
        _db().execute("INSERT OR IGNORE INTO first_model_calls VALUES (?, ?)", (run, time.time()))
    return {"step": step, "next": "record"}


@app.tool("record")
def record(run: str, step: int) -> dict[str, Any]:
    _db().execute("INSERT INTO tool_calls VALUES (?, ?, ?)", (run, step, time.time()))
    return {"step": step, "ok": True}


@app.workflow("e2e")
async def e2e(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        await ctx.model("planner", messages=[{"role": "user", "content": f"step {step}"}], run=run, step=step)
        await ctx.tool("record", run=run, step=step)
    return {"run": run, "steps": STEPS}
