"""Workflows a cancel reaches (runtime.workflow.cancellation) and a deadline bounds; what their tools
saw is written under TEST_COUNTER_DIR (a SQLite file and one line per event), read by
tests/integration/test_cancel_reaches_calls.py.

``booked_then_waits``: books a seat (an effect, undone by ``unbook``), then waits for a signal; its
workflow deadline is 5 s. A cancel is caught, a cleanup tool called (``note_cleanup``), re-raised.
``three_long_calls``: an async tool sleeping 30 s, a sync one polling ``cancelled()``, and an async
effect sleeping 30 s, gathered.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from runtime import RunCancelledError, cancelled
from runtime.workflow.app import App
from runtime.workflow.context import Context

app = App("cancel-apps")


def _dir() -> Path:
    return Path(os.environ["TEST_COUNTER_DIR"])


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(_dir() / "world.db", timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS effects (tool TEXT, key TEXT, arg TEXT, PRIMARY KEY (tool, key))")
    return db


def _apply(tool: str, key: str, arg: str) -> None:
    """An effect applied once per key, as a service that deduplicates on it would."""
    with _db() as db:
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (tool, key, arg))


def note(name: str, line: str) -> None:
    with (_dir() / name).open("a") as out:
        out.write(line + "\n")


@app.tool("book", effect=True)
def book(seat: str, *, idempotency_key: str) -> str:
    _apply("book", idempotency_key, seat)
    return "booked"


@app.tool("unbook", effect=True)
def unbook(seat: str, *, idempotency_key: str) -> str:
    _apply("unbook", idempotency_key, seat)
    return "unbooked"


@app.tool("note_cleanup")
def note_cleanup(reason: str) -> str:
    note("cleanup", reason)
    return "noted"


@app.workflow("booked_then_waits", deadline=5)
async def booked_then_waits(ctx: Context, request: dict[str, Any]) -> Any:
    seat = request["seat"]
    await ctx.tool("book", seat=seat, compensate_with=("unbook", {"seat": seat}))
    try:
        return await ctx.wait_signal("go")
    except RunCancelledError as cancel:
        await ctx.tool("note_cleanup", reason=cancel.reason)
        raise


@app.tool("slow_async")
async def slow_async(seconds: float) -> str:
    note("slow_async", f"started {time.time()}")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note("slow_async", f"cancelled {time.time()}")
        raise
    return "slept"


@app.tool("slow_sync")
def slow_sync(seconds: float) -> str:
    note("slow_sync", f"started {time.time()}")
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if cancelled():
            note("slow_sync", f"stopped {time.time()}")
            return "stopped"
        time.sleep(0.05)
    return "slept"


@app.tool("slow_charge", effect=True)
async def slow_charge(amount: int, *, idempotency_key: str) -> str:
    note("slow_charge", f"started {idempotency_key}")
    await asyncio.sleep(30)
    return "charged"


@app.workflow("three_long_calls")
async def three_long_calls(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.gather(
        ctx.tool("slow_async", seconds=30),
        ctx.tool("slow_sync", seconds=30),
        ctx.tool("slow_charge", amount=12),
    )


@app.workflow("waits")
async def waits(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.wait_signal("go")
