"""The worker's promises, on the in-memory log: commit order, fencing, in-doubt calls, retries.

The same worker code runs on Kafka (tests/integration, tests/chaos keep the real SIGKILL and
SIGSTOP proofs); here each promise is checked step by step, with the log's acks held where the
order matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from runtime.log.records.events import (
    EpochClaimed,
    RunStarted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


class Flaky(Exception):
    """A failure the retry policy retries."""


def refund_app(
    calls: list[dict[str, Any]],
    gate: asyncio.Event | None = None,
    failures: int = 0,
    log_now: Callable[[], list[str]] | None = None,
) -> App:
    """lookup (read-only) then refund (an effect); ``calls`` records every refund attempt (and,
    with ``log_now``, what the log held when it started)."""
    app = App("unit")
    remaining = [failures]

    @app.tool("lookup")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order, "amount": 30}

    @app.tool("refund", effect=True, retry=RetryPolicy(attempts=4, initial_backoff=0.001))
    async def refund(order: str, amount: int, idempotency_key: str) -> str:
        calls.append({"order": order, "key": idempotency_key, "log": log_now() if log_now else None})
        if gate is not None:
            await gate.wait()
        if remaining[0] > 0:
            remaining[0] -= 1
            raise Flaky(f"flaky service ({remaining[0]} failures left)")
        return f"refunded {amount}"

    @app.workflow("refund")
    async def workflow(ctx: Context, order: str) -> str:
        found = await ctx.tool("lookup", order=order)
        result: str = await ctx.tool("refund", order=order, amount=found["amount"])
        return result

    return app


async def test_a_call_starts_only_after_its_scheduled_record_is_acknowledged() -> None:
    calls: list[dict[str, Any]] = []
    run = "run-a1"
    h = Harness(refund_app(calls, log_now=lambda: h.types(run)))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    h.log.hold()
    h.client.submit("refund", "A-1", run_id=run)
    # The worker sees the submission only once it is written: release that one, keep the rest held.
    h.log.release()
    h.log.hold()
    await until(lambda: h.log.held_count() >= 2, what="RunStarted and the lookup's Scheduled appended")
    assert "ToolCallScheduled" not in h.types(run), "held records must not be in the log yet"
    h.log.release()
    await until(lambda: calls, what="the refund to start")
    # When the effect started, its Scheduled record (and everything before it) was durable.
    held_at_start = calls[0]["log"]
    assert held_at_start.count("ToolCallScheduled") == 2
    assert held_at_start[-1] == "ToolCallScheduled"
    status = await h.ended(run)
    assert status.status == "completed" and status.result == "refunded 30"
    assert h.types(run) == [
        "RunStarted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "RunCompleted",
    ]
    await h.stop_all()


async def test_an_effect_does_not_start_behind_a_newer_claim() -> None:
    calls: list[dict[str, Any]] = []
    h = Harness(refund_app(calls))
    worker = h.start("zombie")
    await until(lambda: worker.owned, what="the zombie to own the partition")
    # Another worker claims the partition; the zombie has not noticed (it never polled the group).
    foreign = EpochClaimed(run_id="", partition=0, worker="newer")
    h.log.append(h.settings.events_topic, 0, None, h.serde.encode(foreign)).result()
    run = h.client.submit("refund", "A-2").run_id
    await until(lambda: not worker.owned, what="the zombie to notice the newer claim")
    assert calls == [], "the effect started although a newer epoch claimed the partition first"
    # Readers drop what the zombie wrote after the newer claim.
    assert h.status(run).status == "unknown"
    await h.stop_all()


async def test_a_call_in_flight_at_a_crash_runs_again_in_doubt_with_its_key() -> None:
    calls: list[dict[str, Any]] = []
    gate = asyncio.Event()
    h = Harness(refund_app(calls, gate))
    h.start("w1")
    run = h.client.submit("refund", "A-3").run_id
    await until(lambda: calls, what="the refund to start")
    await h.stop("w1")  # the refund never answered: its Scheduled record has no result
    assert h.types(run)[-1] == "ToolCallScheduled"
    gate.set()
    h.start("w2")
    status = await h.ended(run)
    assert status.status == "completed"
    assert len(calls) == 2 and calls[0]["key"] == calls[1]["key"], "a retry must reuse the recorded key"
    completed = [e for e in h.events(run) if isinstance(e, ToolCallCompleted)]
    assert completed[-1].in_doubt is True and completed[-1].attempt == 2
    assert [(d.kind, d.name, d.idempotency_key) for d in status.in_doubt] == [
        ("tool", "refund", calls[0]["key"])
    ]
    await h.stop_all()


async def test_retries_are_recorded_and_the_key_stays_the_same() -> None:
    calls: list[dict[str, Any]] = []
    h = Harness(refund_app(calls, failures=2))
    h.start()
    run = h.client.submit("refund", "A-4").run_id
    status = await h.ended(run)
    assert status.status == "completed"
    events = h.events(run)
    failed = [e for e in events if isinstance(e, ToolCallFailed)]
    assert [(f.attempt, f.final, f.error_type) for f in failed] == [(1, False, "Flaky"), (2, False, "Flaky")]
    assert [e.attempt for e in events if isinstance(e, ToolCallCompleted)][-1] == 3
    assert len({c["key"] for c in calls}) == 1 and len(calls) == 3
    scheduled = [e for e in events if isinstance(e, ToolCallScheduled) and e.tool == "refund"]
    assert len(scheduled) == 1 and scheduled[0].idempotency_key == calls[0]["key"]
    await h.stop_all()


async def test_a_resubmitted_run_id_starts_nothing_new() -> None:
    calls: list[dict[str, Any]] = []
    h = Harness(refund_app(calls))
    h.start()
    run = h.client.submit("refund", "A-5").run_id
    await h.ended(run)
    h.client.submit("refund", "A-5", run_id=run)
    marker = h.client.submit("refund", "A-6").run_id  # handled after the duplicate: a point to wait for
    await h.ended(marker)
    assert [type(e) for e in h.events(run)].count(RunStarted) == 1
    assert len(calls) == 2
    await h.stop_all()
