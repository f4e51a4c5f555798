"""Workflows of the heartbeat tests (tests/chaos/test_heartbeats.py), run by real worker subprocesses
(`--app support.heartbeat_apps:app`). The "service" is a SQLite file in TEST_COUNTER_DIR, so what
each attempt did survives a killed worker."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from runtime import App, Context, RetryPolicy, heartbeat, last_heartbeat

app = App("heartbeat-tests")

ITEM_S = 0.1  # each item's work: a 60-item call lasts about 6 s
# The first attempt stops after this many items and waits to be killed: on a loaded machine the
# test's kill could otherwise come after the call's end (nothing left in flight to resume).
FIRST_ATTEMPT_ITEMS = 12


def store() -> sqlite3.Connection:
    db = sqlite3.connect(
        Path(os.environ["TEST_COUNTER_DIR"]) / "items.sqlite", timeout=10, isolation_level=None
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS items (key TEXT, item INTEGER, pid INTEGER, PRIMARY KEY (key, item))"
    )
    db.execute("CREATE TABLE IF NOT EXISTS starts (key TEXT, pid INTEGER, resumed_from TEXT)")
    return db


@app.tool("process_items", effect=True, retry=RetryPolicy(timeout=60))
def process_items(items: int, *, idempotency_key: str) -> dict[str, Any]:
    """Processes items 1..items, each written once under the call's key (a service deduplicating on
    it), a heartbeat after each; a retry starts after the last item its details name."""
    resumed = last_heartbeat()
    done = 0 if resumed is None else int(resumed["done"])
    db = store()
    try:
        db.execute("INSERT INTO starts VALUES (?, ?, ?)", (idempotency_key, os.getpid(), json.dumps(resumed)))
        for item in range(done + 1, items + 1):
            time.sleep(ITEM_S)
            db.execute("INSERT OR IGNORE INTO items VALUES (?, ?, ?)", (idempotency_key, item, os.getpid()))
            heartbeat({"done": item})
            while resumed is None and item >= FIRST_ATTEMPT_ITEMS:  # until the test's kill -9
                time.sleep(0.05)
    finally:
        db.close()
    return {"processed": items, "resumed_from": done}


@app.workflow("bulk")
async def bulk(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.tool("process_items", items=request["items"])


# -- a tool that hangs: heartbeat timeout 2 s, timeout 60 s ------------------------------------------------
_released = threading.Event()  # never set: a hung sync attempt gives its thread back after HANG_S
HANG_S = 90.0  # longer than the tests wait: only the heartbeat timeout ends a first attempt


class HungTooLong(Exception):
    """A hung first attempt came back by itself: the heartbeat timeout did not end it."""


@app.tool("hang_once_async", heartbeat_timeout=2, retry=RetryPolicy(timeout=60))
async def hang_once_async(order: str) -> dict[str, Any]:
    """The first attempt says it started, then hangs without a heartbeat; its retry sees that."""
    if last_heartbeat() is None:
        heartbeat({"phase": "started"})
        await asyncio.sleep(HANG_S)
        raise HungTooLong(order)
    return {"order": order, "retried_after": last_heartbeat()}


@app.tool("hang_once_sync", heartbeat_timeout=2, retry=RetryPolicy(timeout=60))
def hang_once_sync(order: str) -> dict[str, Any]:
    if last_heartbeat() is None:
        heartbeat({"phase": "started"})
        _released.wait(HANG_S)
        raise HungTooLong(order)
    return {"order": order, "retried_after": last_heartbeat()}


@app.workflow("hang")
async def hang(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.tool(request["tool"], order=request["order"])
