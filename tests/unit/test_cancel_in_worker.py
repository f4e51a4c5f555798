"""A run's cancel reaching its calls through a worker on the in-memory log (runtime.worker.cancellation):
an async tool's task cancelled, a sync tool seeing ``cancelled()``, an effect named in doubt; and a
workflow deadline firing through the worker's timers. The real-services version, with a worker
subprocess, is tests/integration/test_cancel_reaches_calls.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from runtime import RunCancelledError, cancelled
from runtime.log.records.events import RunStarted, ToolCallFailed, ToolCallScheduled
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


async def test_a_cancel_stops_async_and_sync_calls_and_names_the_effect_in_doubt() -> None:
    seen: list[str] = []
    sync_started = threading.Event()
    app = App("unit-cancel-calls")

    @app.tool("slow_async")
    async def slow_async() -> str:
        seen.append("async started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("async cancelled")
            raise
        return "slept"

    @app.tool("slow_sync")
    def slow_sync() -> str:
        sync_started.set()
        until_at = time.monotonic() + 30
        while time.monotonic() < until_at:
            if cancelled():
                seen.append("sync stopped")
                return "stopped"
            time.sleep(0.01)
        return "slept"

    @app.tool("charge", effect=True)
    async def charge(amount: int, idempotency_key: str) -> str:
        seen.append("charge started")
        await asyncio.sleep(30)
        return "charged"

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.gather(ctx.tool("slow_async"), ctx.tool("slow_sync"), ctx.tool("charge", amount=3))

    assert not cancelled()  # outside a call
    h = Harness(app)
    h.start()
    run = h.client.submit("wf", {}).run_id
    await until(
        lambda: sync_started.is_set() and {"async started", "charge started"} <= set(seen),
        what="the calls to start",
    )
    h.client.run(run).cancel(reason="enough")
    status = await h.ended(run)
    await until(lambda: "sync stopped" in seen, what="the sync tool to see cancelled()")
    assert status.status == "cancelled" and status.reason == "enough"
    assert "async cancelled" in seen
    key = next(
        e.idempotency_key for e in h.events(run) if isinstance(e, ToolCallScheduled) and e.tool == "charge"
    )
    assert [(d.name, d.idempotency_key) for d in status.in_doubt] == [("charge", key)]
    failed = [e for e in h.events(run) if isinstance(e, ToolCallFailed)]
    assert [(e.position, e.in_doubt) for e in failed] == [(1, False), (2, False), (3, True)]
    # Nothing recorded after the run's end: the stopped calls' tasks recorded no outcome.
    assert h.events(run)[-1].type == "RunCancelled"
    await h.stop_all()


async def test_a_workflow_deadline_cancels_the_run_through_the_worker_timers() -> None:
    app = App("unit-deadline")

    @app.tool("cleanup")
    def cleanup(reason: str) -> str:
        return reason

    @app.workflow("wf", deadline=0.3)
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        try:
            return await ctx.wait_signal("go")
        except RunCancelledError as cancel:
            await ctx.tool("cleanup", reason=cancel.reason)
            raise

    h = Harness(app)
    h.start()
    run = h.client.submit("wf", {}).run_id
    status = await h.ended(run)
    started = next(e for e in h.events(run) if isinstance(e, RunStarted))
    assert started.deadline is not None and started.deadline - started.occurred_at == 300
    assert status.status == "cancelled" and (status.reason or "").startswith("deadline ")
    assert [e.tool for e in h.events(run) if isinstance(e, ToolCallScheduled)] == ["cleanup"]
    await h.stop_all()
