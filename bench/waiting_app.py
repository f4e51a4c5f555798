"""The waiting benchmark's procurement agent (bench/waiting.py), native workflow API: one model
call, a wait for an approval signal, then two effects.

The model is in-process (an async function answering at once, no network): what is measured is
the worker holding and waking runs, not a model. The effects are sync tools, as a user's SDK
client is, run in the worker's call pool; each appends one row per *attempt* to a SQLite file
(``WAITING_DB``) with no unique constraint, so an effect applied twice shows as a duplicate row
(bench/waiting.py counts them). bench/waiting_pydantic.py is the same agent as a PydanticAI
``Agent``; it imports ``record_effect`` from here so both variants write the same rows.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from runtime import App, Context

app = App("waiting-bench")
_local = threading.local()
_DB = os.environ.get("WAITING_DB", "/tmp/agentlog-waiting.db")
SIGNAL = "approval"


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # no fsync per commit: the worker is measured, not the disk
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effect_attempts "
        "(run TEXT, effect TEXT, idempotency_key TEXT, variant TEXT, pid INTEGER, at REAL)"
    )
    return conn


def record_effect(run: str, effect: str, idempotency_key: str, variant: str) -> dict[str, Any]:
    """One attempt of an effect: a row, committed (a tool's own store)."""
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = connect(_DB)
    conn.execute(
        "INSERT INTO effect_attempts VALUES (?, ?, ?, ?, ?, ?)",
        (run, effect, idempotency_key, variant, os.getpid(), time.time()),
    )
    return {"effect": effect, "run": run, "applied": True}


@app.model("procurement.model")
async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """Decides at once: reserve the budget, then place the order (after an approval)."""
    return {"supplier": "acme", "amount": 1200.0, "needs_approval": True}


@app.tool("reserve_budget", effect=True, key_args=("order",))
def reserve_budget(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    return record_effect(order, "reserve_budget", idempotency_key, "native")


@app.tool("place_order", effect=True, key_args=("order",))
def place_order(order: str, supplier: str, *, idempotency_key: str) -> dict[str, Any]:
    return record_effect(order, "place_order", idempotency_key, "native")


@app.workflow("procure")
async def procure(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    order = str(request["order"])
    plan = await ctx.model(
        "procurement.model", messages=[{"role": "user", "content": f"procure the items of order {order}"}]
    )
    approval = await ctx.wait_signal(SIGNAL)  # days, in real life: the run waits here
    if not approval.get("approved"):
        return {"order": order, "placed": False}
    await ctx.tool("reserve_budget", order=order, amount=plan["amount"])
    await ctx.tool("place_order", order=order, supplier=plan["supplier"])
    return {"order": order, "placed": True}
