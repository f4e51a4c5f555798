"""A call waiting for a permit, on the in-memory log: which needs a call has, what a wait records,
what status shows, and that a run recovered while waiting waits again (not in doubt)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.log.records.events import PermitAwaited, PermitGranted, ToolCallCompleted
from runtime.worker.limits.gate import PermitGate
from runtime.worker.limits.local import LocalPermits
from runtime.worker.limits.permits import Need
from runtime.worker.metrics import WorkerMetrics
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent
from runtime.workflow.tokens import estimate_tokens
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def intent(kind: str, name: str, args: Any) -> Intent:
    return Intent(1, kind, name, args, "h", DurableFuture(1))


def test_a_call_needs_one_of_each_dimension_of_every_limit_covering_it() -> None:
    app = App("t")
    app.limit("openai", models=["gpt", "gpt-mini"], requests_per_minute=60, tokens_per_minute=20_000)
    app.limit("per-tenant", models=["gpt"], concurrent=2, per="tenant")
    app.limit("payments", tools=["pay"], concurrent=5)
    gate = PermitGate(app.limits, LocalPermits(app.limits), WorkerMetrics())
    messages = [{"role": "user", "content": "x" * 400}]
    call = intent("model", "gpt", {"messages": messages, "params": {"max_tokens": 50}})
    tokens = float(estimate_tokens(messages, {"max_tokens": 50}))
    assert gate.needs(call, (("per-tenant", "acme"),)) == (  # in acquiring order: slots before rates
        Need("per-tenant", "acme", "concurrent", 1.0),
        Need("openai", None, "requests_per_minute", 1.0),
        Need("openai", None, "tokens_per_minute", tokens),
    )
    mini = intent("model", "gpt-mini", {"messages": messages, "params": {}})
    assert [n.dimension for n in gate.needs(mini, ())] == ["requests_per_minute", "tokens_per_minute"]
    assert gate.needs(intent("tool", "pay", {"amount": 1}), ()) == (
        Need("payments", None, "concurrent", 1.0),
    )
    assert gate.needs(intent("tool", "lookup", {}), ()) == ()  # no limit covers it: nothing to do


def payments_app(calls_in_flight: list[int], gate: asyncio.Event) -> App:
    app = App("t")
    app.limit("payments", tools=["pay"], concurrent=1)
    in_flight = [0]

    @app.tool("pay")
    async def pay(amount: int) -> int:
        in_flight[0] += 1
        calls_in_flight.append(in_flight[0])
        await gate.wait()
        in_flight[0] -= 1
        return amount

    @app.workflow("pay")
    async def workflow(ctx: Context, request: dict[str, Any]) -> int:
        paid: int = await ctx.tool("pay", amount=request["amount"])
        return paid

    return app


async def test_a_call_past_the_limit_waits_and_the_run_records_and_shows_it() -> None:
    in_flight: list[int] = []
    release = asyncio.Event()
    h = Harness(payments_app(in_flight, release))
    worker = h.start()
    # a worker's share of a deployment's limit arrives with the coordinator's first grant
    permits = worker.executor.permits
    assert permits is not None
    slot = [Need("payments", None, "concurrent", 1.0)]
    await until(lambda: permits.blocking(slot) is None, what="the worker's share of the payments limit")
    h.client.submit("pay", {"amount": 1}, run_id="first")
    await until(lambda: in_flight == [1], what="the first payment to start")
    h.client.submit("pay", {"amount": 2}, run_id="second")
    await until(lambda: "PermitAwaited" in h.types("second"), what="the second payment to wait")
    status = h.status("second")
    assert [(w.limit, w.dimension, w.position) for w in status.waiting_for] == [("payments", "concurrent", 1)]
    assert status.waiting_for[0].describe(status.waiting_for[0].since_ms + 12_500) == (
        "waiting for payments concurrent calls, 12 s (position 1)"
    )
    assert h.status("second").as_dict()["waiting_for"][0]["limit"] == "payments"
    release.set()
    assert (await h.ended("first")).status == "completed"
    assert (await h.ended("second")).status == "completed"
    assert max(in_flight) == 1
    events = h.events("second")
    awaited = next(e for e in events if isinstance(e, PermitAwaited))
    granted = next(e for e in events if isinstance(e, PermitGranted))
    done = next(e for e in events if isinstance(e, ToolCallCompleted))
    assert (awaited.limit, awaited.dimension, awaited.attempt, awaited.needed) == (
        "payments",
        "concurrent",
        1,
        1,
    )
    assert (granted.position, granted.attempt) == (1, 1)
    assert granted.waited_ms >= 0
    assert done.attempt == 1, "waiting spent no attempt"
    assert events.index(awaited) < events.index(granted) < events.index(done)
    assert h.status("second").waiting_for == ()
    # The worker's share of the limit is granted by now (the first call may have waited for the
    # deployment's first grant): a call granted at once writes nothing more than any call.
    h.client.submit("pay", {"amount": 3}, run_id="third")
    assert (await h.ended("third")).status == "completed"
    assert h.types("third") == ["RunStarted", "ToolCallScheduled", "ToolCallCompleted", "RunCompleted"]
    await h.stop_all()


async def test_a_run_recovered_while_waiting_for_a_permit_waits_again_not_in_doubt() -> None:
    in_flight: list[int] = []
    release = asyncio.Event()
    h = Harness(payments_app(in_flight, release))
    h.start("w1")
    h.client.submit("pay", {"amount": 1}, run_id="first")
    await until(lambda: in_flight == [1], what="the first payment to start")
    h.client.submit("pay", {"amount": 2}, run_id="second")
    await until(lambda: "PermitAwaited" in h.types("second"), what="the second payment to wait")
    await h.stop("w1")  # the first call is cut off mid-call; the second never started
    release.set()
    h.start("w2")
    first, second = await h.ended("first"), await h.ended("second")
    assert (first.status, second.status) == ("completed", "completed")
    assert [c.position for c in first.in_doubt] == [1], "the call that ran is in doubt"
    assert second.in_doubt == (), "the call that only waited is not"
    done = [e for e in h.events("second") if isinstance(e, ToolCallCompleted)]
    assert [(e.attempt, e.in_doubt) for e in done] == [(1, False)]
    await h.stop_all()


def test_a_call_larger_than_its_limit_fails_for_good_naming_it() -> None:
    app = App("t")

    @app.model("gpt")
    def gpt(messages: Any, **params: Any) -> Any:
        return {}

    app.limit("openai", models=["gpt"], tokens_per_minute=2_000)
    gate = PermitGate(app.limits, LocalPermits(app.limits), WorkerMetrics())
    needs = gate.needs(intent("model", "gpt", {"messages": [], "params": {"max_tokens": 4_000}}), ())

    async def note(event: Any) -> bool:
        raise AssertionError("an unsatisfiable call records no wait")

    from runtime.worker.limits.permits import LimitUnsatisfiable

    with pytest.raises(LimitUnsatisfiable, match=r"openai tokens/min.*limits\.openai"):
        asyncio.run(gate.acquire(needs, 1, 1, note))


def test_a_scrape_shows_the_calls_waiting_per_limit_and_how_long_they_waited() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from runtime.config import Settings
    from runtime.log.schemas.serde import Serde
    from runtime.worker.metric_families import WorkerCollector

    metrics = WorkerMetrics()
    metrics.permit_wait("openai", "requests_per_minute", None)
    metrics.permit_wait("openai", "requests_per_minute", None)
    metrics.permit_wait("openai", "requests_per_minute", 12.5)  # one of the two was granted
    registry = CollectorRegistry()
    registry.register(WorkerCollector(metrics, list, Serde.offline(Settings()), SimpleNamespace(value={})))  # type: ignore[arg-type]
    samples = {
        (s.name, s.labels.get("le", "")): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
        if s.labels.get("limit") == "openai"
    }
    assert samples[("agentlog_calls_waiting_for_permit", "")] == 1
    assert samples[("agentlog_permit_wait_seconds_count", "")] == 1
    assert samples[("agentlog_permit_wait_seconds_sum", "")] == 12.5
    assert samples[("agentlog_permit_wait_seconds_bucket", "10.0")] == 0
    assert samples[("agentlog_permit_wait_seconds_bucket", "30.0")] == 1


async def test_an_effect_that_waited_starts_once_its_permit_record_is_durable() -> None:
    """Else a crash after the effect started but before PermitGranted landed would leave the call
    "waiting" in the log, and its successor would run it again as not in doubt."""
    app = App("t")
    app.limit("refunds", tools=["refund"], concurrent=1)
    release = asyncio.Event()
    seen: dict[str, list[str]] = {}

    @app.tool("refund", effect=True)
    async def refund(order: str, idempotency_key: str) -> str:
        seen[order] = h.types(order)  # what the log held when the effect started
        if order == "first":
            await release.wait()
        return order

    @app.workflow("refund")
    async def workflow(ctx: Context, order: str) -> str:
        done: str = await ctx.tool("refund", order=order)
        return done

    h = Harness(app)
    h.start()
    h.client.submit("refund", "first", run_id="first")
    await until(lambda: "first" in seen, what="the first refund to start")
    h.client.submit("refund", "second", run_id="second")
    await until(lambda: "PermitAwaited" in h.types("second"), what="the second refund to wait")
    release.set()
    assert (await h.ended("second")).status == "completed"
    assert seen["second"][-2:] == ["PermitAwaited", "PermitGranted"]
    await h.stop_all()
