"""The workflow of tests/chaos/test_step_overlap_crash.py (`--app support.overlap_apps:app`): a
tool, a durable timer, a second tool -- none of them effects, so each starts before its Scheduled
record is acknowledged (runtime.worker.execution). Every call leaves a row in a SQLite file
(``OVERLAP_WORLD_DB``), so a call made twice shows; ``OVERLAP_HANG=<label>`` makes that call hang
after its row is written, for the test to kill the worker there.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any

from runtime import App, Context

app = App("overlap-tests")


def calls_of(db: str, label: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS calls (label TEXT, pid INTEGER)")
        return int(conn.execute("SELECT COUNT(*) FROM calls WHERE label = ?", (label,)).fetchone()[0])


@app.tool("note")
async def note(label: str) -> str:
    with sqlite3.connect(os.environ["OVERLAP_WORLD_DB"], timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS calls (label TEXT, pid INTEGER)")
        conn.execute("INSERT INTO calls (label, pid) VALUES (?, ?)", (label, os.getpid()))
    if os.environ.get("OVERLAP_HANG") == label:
        await asyncio.sleep(120)
    return f"noted {label}"


@app.workflow("overlap")
async def overlap(ctx: Context, request: dict[str, Any]) -> list[str]:
    first: str = await ctx.tool("note", label="before")
    await ctx.sleep(float(request["sleep_s"]))
    second: str = await ctx.tool("note", label="after")
    return [first, second]
