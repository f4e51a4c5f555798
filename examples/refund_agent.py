"""The refund demo: a 40-step agent that looks things up, emails, refunds and opens a ticket.

Each step asks the planner model, then calls one tool. Steps 14, 22 and 30 have effects
(send_email, refund 41.60 on the order, create_ticket). The "outside world" is a SQLite file
(``REFUND_WORLD_DB``) whose effects table has a UNIQUE idempotency key and which counts every
attempt, so a duplicate effect or a re-executed model call is visible. Without it, the world
lives in memory (the benchmark).

The planner is scripted (no model weights or network here): it returns a fresh random nonce
per call, so a re-executed call shows up as a different nonce. For the crash demo and tests:
``REFUND_CRASH_AT_STEP=N`` makes the worker SIGKILL itself the first time step N's model call
starts (after it left its trace in the world); ``REFUND_CRASH_BEFORE_STEP=N`` before step N's model
call does anything; ``REFUND_CRASH_AFTER_STEP=N`` once step N's tool (the lookup, or the effect,
applied) has run, before its result goes back to the worker; ``REFUND_HANG_AT_STEP=N`` makes that call hang instead (``REFUND_HANG_SECONDS``, default
60) so a test can kill or stop the worker there; ``REFUND_HANG_IN_EFFECT=refund`` hangs after
the refund is applied but before its result can be recorded.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from runtime import App, Context

app = App("refund-demo")
EFFECT_STEPS = {14: "send_email", 22: "refund", 30: "create_ticket"}
_STEP_OF_EFFECT = {kind: step for step, kind in EFFECT_STEPS.items()}
_local = threading.local()
_memory_calls: list[tuple[int, str]] = []
# Read once: the planner runs 40 times a run (and os.environ lookups showed in the profile).
_ENV = {k: v for k, v in os.environ.items() if k.startswith("REFUND_")}
# A fresh nonce per call shows a re-executed call; it needs no cryptographic randomness (and a
# getrandom() syscall per call is wasted on a hot path). Seeded from os.urandom: differs per process.
_nonces = random.Random()
os.register_at_fork(after_in_child=_nonces.seed)  # a worker forked by `--respawn` draws its own


def _db() -> sqlite3.Connection | None:
    path = _ENV.get("REFUND_WORLD_DB")
    if not path:
        return None
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        init_world(conn)
        _local.conn = conn
    return conn


def init_world(conn: sqlite3.Connection) -> None:
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS model_calls (id INTEGER PRIMARY KEY, step INTEGER, nonce TEXT, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effect_attempts (id INTEGER PRIMARY KEY, kind TEXT, idempotency_key TEXT, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effects (idempotency_key TEXT PRIMARY KEY, kind TEXT, detail TEXT);
        """
    )


def _first_time(tag: str) -> bool:
    """True once per world: a restarted worker must not crash or hang at the same place again."""
    marker = Path(_ENV.get("REFUND_WORLD_DB", "/tmp/refund-world.db") + f".{tag}")
    if marker.exists():
        return False
    marker.write_text(str(os.getpid()))
    return True


def _hang_seconds(kind: str, where: str) -> float:
    """How long to hang here, as the environment asks -- once per world. Called *before* the
    call leaves its trace in the world: a test kills the worker as soon as it sees that trace,
    and the marker must already say "done" so the successor does not hang again."""
    if _ENV.get(f"REFUND_HANG_{kind}") == where and _first_time(f"hang-{kind}-{where}"):
        return float(_ENV.get("REFUND_HANG_SECONDS", "60"))
    return 0.0


def _crash_here(kind: str, where: str) -> None:
    """SIGKILL this worker, as the environment asks -- once per world (after the trace)."""
    if _ENV.get(f"REFUND_CRASH_{kind}") == where and _first_time(f"crash-{kind}-{where}"):
        os.kill(os.getpid(), signal.SIGKILL)


# The planner and the lookup are async, as real model and HTTP-tool clients are (see
# runtime.models.openai): they hold no thread while they wait. The effecting tools below are
# sync and run in the worker's call pool.
@app.model("planner")
async def planner(messages: list[dict[str, Any]], step: int = 0, **params: Any) -> dict[str, Any]:
    _crash_here("BEFORE_STEP", str(step))
    nonce = f"{_nonces.getrandbits(32):08x}"
    hang = _hang_seconds("AT_STEP", str(step))
    db = _db()
    if db is not None:
        db.execute("INSERT INTO model_calls (step, nonce, pid) VALUES (?, ?, ?)", (step, nonce, os.getpid()))
    else:
        _memory_calls.append((step, nonce))
    _crash_here("AT_STEP", str(step))
    if hang:
        await asyncio.sleep(hang)
    tool = EFFECT_STEPS.get(step, "lookup")
    return {"step": step, "nonce": nonce, "next": tool}


@app.tool("lookup")
async def lookup(order: str, step: int) -> dict[str, Any]:
    found = {"order": order, "step": step, "status": "delivered"}
    _crash_here("AFTER_STEP", str(step))
    return found


def _apply_effect(kind: str, key: str, detail: str) -> dict[str, Any]:
    db = _db()
    if db is None:
        return {"kind": kind, "applied": True}
    hang = _hang_seconds("IN_EFFECT", kind)
    db.execute(
        "INSERT INTO effect_attempts (kind, idempotency_key, pid) VALUES (?, ?, ?)", (kind, key, os.getpid())
    )
    cursor = db.execute(
        "INSERT OR IGNORE INTO effects (idempotency_key, kind, detail) VALUES (?, ?, ?)", (key, kind, detail)
    )
    _crash_here("IN_EFFECT", kind)
    _crash_here("AFTER_STEP", str(_STEP_OF_EFFECT[kind]))
    time.sleep(hang)
    return {"kind": kind, "applied": cursor.rowcount == 1}


@app.tool("send_email", effect=True, key_args=("to", "template"))
def send_email(to: str, template: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    return _apply_effect("send_email", idempotency_key, f"{to}:{template}")


@app.tool("refund", effect=True, key_args=("order", "amount"))
def refund(order: str, amount: float, reason: str, *, idempotency_key: str) -> dict[str, Any]:
    return _apply_effect("refund", idempotency_key, f"{order}:{amount}")


@app.tool("create_ticket", effect=True, key_args=("order", "queue"))
def create_ticket(order: str, queue: str, summary: str, *, idempotency_key: str) -> dict[str, Any]:
    return _apply_effect("create_ticket", idempotency_key, f"{order}:{queue}")


@app.workflow("refund")
async def refund_agent(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    order = str(request["order"])
    steps = int(request.get("steps", 40))
    nonces: list[str] = []
    for step in range(1, steps + 1):
        decision = await ctx.model(
            "planner",
            messages=[{"role": "user", "content": f"order {order}, step {step}"}],
            prompt_version="v1",
            step=step,
        )
        nonces.append(decision["nonce"])
        if decision["next"] == "send_email":
            await ctx.tool(
                "send_email",
                to="customer@example.com",
                template="refund-started",
                body=f"ref {decision['nonce']}",
            )
        elif decision["next"] == "refund":
            await ctx.tool(
                "refund", order=order, amount=41.60, reason=f"planner {decision['nonce']} approved"
            )
        elif decision["next"] == "create_ticket":
            await ctx.tool(
                "create_ticket", order=order, queue="billing", summary=f"refund done ({decision['nonce']})"
            )
        else:
            await ctx.tool("lookup", order=order, step=step)
    return {"order": order, "steps": steps, "nonces": nonces}
