"""Workflows of the child-run tests in real worker subprocesses (`--app support.child_apps:app`).

``write_row`` is an effect that writes one row to a SQLite file (``CHILD_DB``) per call, and one
row per idempotency key: the test counts both, so a child whose effect ran twice shows."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from runtime import App, Context

app = App("child-run-tests")


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["CHILD_DB"], timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS calls (run TEXT, key TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run TEXT)")
    return db


@app.tool("write_row", effect=True)
def write_row(run: str, idempotency_key: str) -> str:
    with _db() as db:
        db.execute("INSERT INTO calls VALUES (?, ?)", (run, idempotency_key))
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (idempotency_key, run))
    return idempotency_key


@app.workflow("reader")
async def reader(ctx: Context, n: int) -> int:
    await ctx.tool("write_row", run=ctx.run_id)
    await ctx.wait_signal("go")  # the test lets it end once it has killed what it kills
    return n * 10


@app.workflow("fan_out")
async def fan_out(ctx: Context, n: int) -> list[int]:
    return list(await ctx.gather(*(ctx.child("reader", i) for i in range(1, n + 1))))


@app.workflow("two_policies")
async def two_policies(ctx: Context, n: int) -> Any:
    ctx.start_child("reader", 1)  # parent_close="cancel", the default
    ctx.start_child("reader", 2, parent_close="run_on")
    return await ctx.wait_signal("never")


@app.workflow("quick")
async def quick(ctx: Context, n: int) -> int:
    await ctx.tool("write_row", run=ctx.run_id)
    return n * 10


@app.workflow("one_child")
async def one_child(ctx: Context, n: int) -> int:
    return int(await ctx.child("quick", n)) + 1


# A crash point (``CHILD_HANG`` in the worker's environment) for tests/chaos/test_child_runs_crash.py:
# ``RunSubmitted`` -- the parent's ChildRunScheduled is acknowledged, the child's submission not
# produced; ``ChildEnded`` -- the child's ending is acknowledged, its notice to the parent not
# produced. The worker writes ``$CHILD_HANG_FILE`` and stops its loop there until the test kills it.
# Test-only: the patch lives here, in tests/, and wraps the runtime's own ChildLinks.
_HANG = os.environ.get("CHILD_HANG")
if _HANG:
    from pathlib import Path

    from runtime.worker.children import ChildLinks

    _send = ChildLinks._send

    def _send_or_hang(self: ChildLinks, owned: Any, command: Any, about: str, done: Any) -> None:
        if command.type == _HANG:
            Path(os.environ["CHILD_HANG_FILE"]).write_text(command.run_id)
            while True:  # the event loop stops here; the test sends SIGKILL
                time.sleep(1)
        _send(self, owned, command, about, done)

    ChildLinks._send = _send_or_hang  # type: ignore[method-assign]
