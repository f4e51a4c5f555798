"""The history size warning and limit, on the in-memory log.

The warning is a structured log record and nothing else (no event is written for it), so this
is the one place a test reads a log record: its fields, through ``logging``, never its wording.
"""

from __future__ import annotations

import json
import logging

import pytest

from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def short_app() -> App:
    app = App("history")

    @app.tool("lookup")
    async def lookup(step: int) -> int:
        return step

    @app.workflow("short")
    async def short(ctx: Context, steps: int) -> int:
        for step in range(steps):
            await ctx.tool("lookup", step=step)
        return steps

    return app


async def test_a_run_past_the_warn_threshold_is_warned_once_and_one_at_the_limit_parked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(short_app())
    h.settings = h.settings.model_copy(update={"history_warn_events": 6, "history_limit_events": 12})
    caplog.set_level(logging.WARNING, logger="agentlog.worker")
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    small = h.client.submit("short", 2).run_id  # 6 events, the last one ends it: neither warned nor parked
    big = h.client.submit("short", 20).run_id
    assert (await h.ended(small)).status == "completed"
    parked = await h.ended(big)
    assert parked.status == "parked" and "history limit reached: 12 events" in (parked.reason or "")
    assert parked.events == 13  # the 12 that reached the limit, then RunParked
    warnings = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "agentlog.worker" and r.levelno == logging.WARNING and r.getMessage().startswith("{")
    ]
    warned = [(w["run"], w["events"]) for w in warnings if w.get("event") == "history_size_warning"]
    assert warned == [(big, 6)]  # once, when the live run reached the threshold
    await h.stop_all()
