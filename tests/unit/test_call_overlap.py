"""A model call or a tool without effect starts before its Scheduled record is acknowledged and
waits for that ack after the call; an effect waits before it starts (runtime.worker.execution).
On the in-memory log, whose acks the test holds and releases (tests/chaos/test_step_overlap_crash.py
kills a worker on Kafka in that window)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.log.records.events import ToolCallCompleted
from runtime.worker.commands import WorkerError
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


class Flaky(Exception):
    """A failure the retry policy retries."""


def overlap_app(started: list[str], lookup_failures: int = 0) -> App:
    """lookup (read-only; fails ``lookup_failures`` times first) then refund (an effect);
    ``started`` gets each call's name as it starts."""
    app = App("unit")
    remaining = [lookup_failures]

    @app.tool("lookup", retry=RetryPolicy(attempts=3, initial_backoff=0.001))
    async def lookup(order: str) -> dict[str, Any]:
        started.append("lookup")
        if remaining[0] > 0:
            remaining[0] -= 1
            raise Flaky("lookup service blinked")
        return {"order": order, "amount": 30}

    @app.tool("refund", effect=True)
    async def refund(order: str, amount: int, idempotency_key: str) -> str:
        started.append("refund")
        return f"refunded {amount}"

    @app.workflow("refund")
    async def workflow(ctx: Context, order: str) -> str:
        found = await ctx.tool("lookup", order=order)
        result: str = await ctx.tool("refund", order=order, amount=found["amount"])
        return result

    return app


async def submitted_with_acks_held(h: Harness, run: str) -> None:
    """Submit ``run`` and let the worker read it; hold every ack of what the worker appends."""
    h.log.hold()
    h.client.submit("refund", "A-1", run_id=run)
    h.log.release()  # the submission itself is written
    h.log.hold()


async def serving_with_acks_held(app: App, run: str) -> Harness:
    """A worker "w1" serving ``app``, ``run`` submitted to it, every ack of what it appends held."""
    h = Harness(app)
    worker = h.start("w1")
    await until(lambda: worker.owned, what="the worker to own the partition")
    await submitted_with_acks_held(h, run)
    return h


async def loop_turns(n: int = 20) -> None:
    """Give every ready task many turns (nothing the test waits for here depends on time)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_read_only_call_starts_before_its_scheduled_ack_and_an_effect_after() -> None:
    started: list[str] = []
    run = "run-o1"
    h = await serving_with_acks_held(overlap_app(started), run)
    await until(lambda: started == ["lookup"], what="the lookup to start")
    assert h.types(run) == [], "the lookup started with its Scheduled record (and RunStarted) unacknowledged"
    await loop_turns()
    # Its outcome waits for that ack: nothing more was appended, the workflow did not go on.
    assert h.log.held_count() == 2 and started == ["lookup"]

    h.log.release()
    h.log.hold()  # the lookup's result and the refund's Scheduled record (and the run's index entry): held
    await until(lambda: h.log.held_count() >= 2, what="the lookup's result and the refund's Scheduled")
    await loop_turns()
    assert started == ["lookup"], "the effect started before its Scheduled record was acknowledged"
    assert h.types(run) == ["RunStarted", "ToolCallScheduled"]

    h.log.release()
    status = await h.ended(run)
    assert status.status == "completed" and status.result == "refunded 30"
    assert started == ["lookup", "refund"]
    assert h.types(run) == [
        "RunStarted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "RunCompleted",
    ]
    await h.stop_all()


async def test_a_failed_attempt_is_recorded_only_once_its_scheduled_record_is_acknowledged() -> None:
    started: list[str] = []
    run = "run-o2"
    h = await serving_with_acks_held(overlap_app(started, lookup_failures=1), run)
    await until(lambda: started == ["lookup"], what="the first lookup attempt")
    await loop_turns()
    # The attempt failed, but its ToolCallFailed waits for the Scheduled ack, and so does the retry.
    assert h.log.held_count() == 2 and started == ["lookup"]
    h.log.release()
    status = await h.ended(run)
    assert status.status == "completed"
    assert h.types(run)[:4] == ["RunStarted", "ToolCallScheduled", "ToolCallFailed", "ToolCallCompleted"]
    assert started == ["lookup", "lookup", "refund"]
    await h.stop_all()


async def test_a_scheduled_record_refused_drops_the_outcome_and_stops_the_worker() -> None:
    started: list[str] = []
    run = "run-o3"
    h = await serving_with_acks_held(overlap_app(started), run)
    await until(lambda: started == ["lookup"], what="the lookup to start")
    h.log.fail_held("broker refused the batch")
    with pytest.raises(
        WorkerError, match=r"the record scheduling tool 'lookup' at position .* was not acknowledged"
    ):
        await h.task("w1")
    h.running.pop("w1")
    assert h.types(run) == [], "nothing of the run may be recorded behind a refused record"

    # The successor knows nothing of the lookup: it runs it as a first attempt, not in doubt.
    h.start("w2")
    status = await h.ended(run)
    assert status.status == "completed" and status.in_doubt == ()
    assert started == ["lookup", "lookup", "refund"]
    completed = [e for e in h.events(run) if isinstance(e, ToolCallCompleted)]
    assert [(e.attempt, e.in_doubt) for e in completed] == [(1, False), (1, False)]
    await h.stop_all()


def effect_then_lookup_app(started: list[str]) -> App:
    """refund (an effect) then notify (read-only); ``started`` gets each call's name as it starts."""
    app = App("unit")

    @app.tool("refund", effect=True)
    async def refund(order: str, idempotency_key: str) -> str:
        started.append("refund")
        return "refunded"

    @app.tool("notify")
    async def notify(order: str) -> str:
        started.append("notify")
        return "sent"

    @app.workflow("refund")
    async def workflow(ctx: Context, order: str) -> str:
        await ctx.tool("refund", order=order)
        result: str = await ctx.tool("notify", order=order)
        return result

    return app


async def test_a_call_after_an_effect_waits_for_the_effect_outcome_to_be_acknowledged() -> None:
    # Started early, the notify could outlive the refund's outcome at a crash: the successor would
    # then find the refund, not the notify, in doubt, and run the refund again.
    started: list[str] = []
    run = "run-o4"
    h = await serving_with_acks_held(effect_then_lookup_app(started), run)
    await until(lambda: h.log.held_count() == 2, what="RunStarted and the refund's Scheduled record")
    h.log.release()
    h.log.hold()
    await until(lambda: started == ["refund"], what="the refund to run")
    await until(lambda: h.log.held_count() >= 2, what="the refund's outcome and the notify's Scheduled")
    await loop_turns()
    assert started == ["refund"], "the notify started before the refund's outcome was acknowledged"

    h.log.release()
    status = await h.ended(run)
    assert status.status == "completed" and status.result == "sent"
    assert started == ["refund", "notify"]
    await h.stop_all()
