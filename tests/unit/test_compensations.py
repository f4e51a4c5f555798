"""Compensations (runtime.workflow.compensation), on the in-memory log: a later failure or a
cancellation undoes the run's effects newest first, each compensation an effect with a key derived
from the effect it undoes, recorded, shown in the status, and replayed as it ran. The SIGKILL in
the middle of an unwind is tests/chaos/test_compensation_crash.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.log.records.events import RunCancelled, RunFailed, RunParked, SignalReceived, ToolCallScheduled
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.compensation import CANCEL_SIGNAL, compensation_key
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def saga_app(calls: list[tuple[str, Any, str]], *, reverse_fails: bool = False) -> App:
    """refund (undone by reverse_refund), reserve (undone by release), then a step that fails or
    a wait for a signal; ``calls``: every effect attempt (tool, its main argument, its key)."""
    app = App("unit-saga")

    @app.tool("refund", effect=True, key_args=("order",))
    def refund(order: str, amount: int, idempotency_key: str) -> str:
        calls.append(("refund", order, idempotency_key))
        return f"refunded {amount}"

    @app.tool("reverse_refund", effect=True, retry=RetryPolicy(attempts=2, initial_backoff=0.001))
    def reverse_refund(order: str, idempotency_key: str) -> str:
        calls.append(("reverse_refund", order, idempotency_key))
        if reverse_fails:
            raise ConnectionError("the payment service refuses reversals today")
        return "reversed"

    @app.tool("reserve", effect=True)
    def reserve(sku: str, idempotency_key: str) -> str:
        calls.append(("reserve", sku, idempotency_key))
        return "reserved"

    @app.tool("release", effect=True)
    def release(sku: str, idempotency_key: str) -> str:
        calls.append(("release", sku, idempotency_key))
        return "released"

    @app.tool("ship", retry=RetryPolicy(attempts=1))
    def ship(order: str) -> str:
        raise ValueError(f"no courier for order {order}")

    @app.workflow("saga")
    async def saga(ctx: Context, request: dict[str, Any]) -> Any:
        order = request["order"]
        await ctx.tool("refund", order=order, amount=30, compensate_with=("reverse_refund", {"order": order}))
        await ctx.tool("reserve", sku="sku-1", compensate_with=("release", {"sku": "sku-1"}))
        if request.get("wait"):
            return await ctx.wait_signal("go")
        return await ctx.tool("ship", order=order)

    @app.workflow("unregistered")
    async def unregistered(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.tool("refund", order="x", amount=1, compensate_with=("no_such_tool", {}))

    return app


async def test_a_failing_step_undoes_the_effects_newest_first_then_fails_as_it_would_have() -> None:
    calls: list[tuple[str, Any, str]] = []
    h = Harness(saga_app(calls))
    h.start()
    run = h.client.submit("saga", {"order": "A-1"}).run_id
    status = await h.ended(run)
    assert status.status == "failed"
    assert status.reason is not None and "no courier for order A-1" in status.reason
    assert [(tool, arg) for tool, arg, _ in calls] == [
        ("refund", "A-1"),
        ("reserve", "sku-1"),
        ("release", "sku-1"),
        ("reverse_refund", "A-1"),
    ]
    keys = {tool: key for tool, _, key in calls}
    # Each compensation's key is derived from the key of the effect it undoes (itself from the run).
    assert keys["release"] == compensation_key(keys["reserve"], "release")
    assert keys["reverse_refund"] == compensation_key(keys["refund"], "reverse_refund")
    scheduled = [e for e in h.events(run) if isinstance(e, ToolCallScheduled)]
    assert [(e.tool, e.compensates) for e in scheduled] == [
        ("refund", None),
        ("reserve", None),
        ("ship", None),
        ("release", 2),
        ("reverse_refund", 1),
    ]
    assert [(c.tool, c.compensates, c.state, c.idempotency_key) for c in status.compensations] == [
        ("release", 2, "completed", keys["release"]),
        ("reverse_refund", 1, "completed", keys["reverse_refund"]),
    ]
    assert isinstance(h.events(run)[-1], RunFailed)
    # The history replays as it ran: the same calls, the same ending, no divergence.
    replayed = Replayer(app=saga_app([])).replay(h.events(run))
    assert replayed.ok and replayed.status == "failed"
    await h.stop_all()


async def test_a_cancelled_run_undoes_its_effects_then_ends_cancelled() -> None:
    calls: list[tuple[str, Any, str]] = []
    h = Harness(saga_app(calls))
    h.start()
    run = h.client.submit("saga", {"order": "C-1", "wait": True}).run_id
    await until(lambda: len(calls) == 2, what="both effects to run")
    # The reserve's result recorded: the run waits for the signal (a wait without timeout records nothing).
    await until(lambda: h.types(run)[-1] == "ToolCallCompleted", what="the run to wait for the signal")
    h.client.run(run).cancel(reason="the customer withdrew")
    status = await h.ended(run)
    assert status.status == "cancelled" and status.reason == "the customer withdrew"
    assert [tool for tool, _, _ in calls] == ["refund", "reserve", "release", "reverse_refund"]
    events = h.events(run)
    marker = next(e for e in events if isinstance(e, SignalReceived))
    assert marker.name == CANCEL_SIGNAL  # recorded before the unwind: a replay unwinds at the same point
    assert isinstance(events[-1], RunCancelled) and events[-1].command_offset == marker.command_offset
    assert [c.state for c in status.compensations] == ["completed", "completed"]
    replayed = Replayer(app=saga_app([])).replay(events)
    assert replayed.ok and replayed.status == "cancelled"
    await h.stop_all()


async def test_a_compensation_that_fails_for_good_parks_the_run_naming_what_is_left() -> None:
    calls: list[tuple[str, Any, str]] = []
    h = Harness(saga_app(calls, reverse_fails=True))
    h.start()
    run = h.client.submit("saga", {"order": "P-1"}).run_id
    status = await h.ended(run)
    assert status.status == "parked"
    assert [tool for tool, _, _ in calls] == [
        "refund",
        "reserve",
        "release",
        "reverse_refund",
        "reverse_refund",
    ]
    assert status.reason is not None
    assert "compensation reverse_refund of refund at position 1 failed" in status.reason
    assert "no courier for order P-1" in status.reason  # how the run was going to end
    assert isinstance(h.events(run)[-1], RunParked)
    assert [(c.tool, c.state) for c in status.compensations] == [
        ("release", "completed"),
        ("reverse_refund", "failed"),
    ]
    await h.stop_all()


async def test_a_run_without_compensations_is_cancelled_at_its_await() -> None:
    app = App("unit-plain")

    @app.workflow("waits")
    async def waits(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.wait_signal("go")

    h = Harness(app)
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own its partition")
    run = h.client.submit("waits", {}).run_id
    await until(lambda: "RunStarted" in h.types(run), what="the run to start")
    await asyncio.sleep(0.01)
    h.client.run(run).cancel(reason="no longer needed")
    status = await h.ended(run)
    assert status.status == "cancelled" and status.compensations == ()
    # The cancel is recorded first (the workflow sees it at its await: runtime.workflow.cancellation).
    assert [type(e).__name__ for e in h.events(run)][-2:] == ["SignalReceived", "RunCancelled"]
    assert status.reason == "no longer needed"
    await h.stop_all()


async def test_an_unregistered_compensation_fails_the_run_before_the_effect_runs() -> None:
    calls: list[tuple[str, Any, str]] = []
    h = Harness(saga_app(calls))
    h.start()
    run = h.client.submit("unregistered", {}).run_id
    status = await h.ended(run)
    assert status.status == "failed"
    assert status.reason is not None and "compensation 'no_such_tool' of 'refund'" in status.reason
    assert calls == []
    await h.stop_all()


async def test_the_cancel_signal_name_is_reserved() -> None:
    from runtime.errors import AgentlogError

    h = Harness(saga_app([]))
    with pytest.raises(AgentlogError, match="reserved"):
        h.client.run("any-run").signal(CANCEL_SIGNAL, "sneaky")


async def test_an_effect_in_flight_at_the_cancel_is_stopped_in_doubt_and_undone_too() -> None:
    calls: list[str] = []
    gate = asyncio.Event()
    app = App("unit-saga-in-flight")

    @app.tool("charge", effect=True)
    async def charge(account: str, idempotency_key: str) -> str:
        calls.append("charge")
        try:
            await gate.wait()  # the cancel arrives while the charge is in flight
        except asyncio.CancelledError:
            calls.append("charge stopped")
            raise
        return "charged"

    @app.tool("refund_charge", effect=True)
    def refund_charge(account: str, idempotency_key: str) -> str:
        calls.append("refund_charge")
        return "refunded"

    @app.workflow("pay")
    async def pay(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.tool("charge", account="a-1", compensate_with=("refund_charge", {"account": "a-1"}))

    h = Harness(app)
    h.start()
    run = h.client.submit("pay", {}).run_id
    await until(lambda: calls == ["charge"], what="the charge to start")
    h.client.run(run).cancel(reason="too late")
    await until(
        lambda: CANCEL_SIGNAL in [getattr(e, "name", "") for e in h.events(run)], what="the cancel recorded"
    )
    status = await h.ended(run)
    # Stopped mid-flight (its task cancelled), it may have taken effect: in doubt, with its key, and undone.
    assert status.status == "cancelled" and calls == ["charge", "charge stopped", "refund_charge"]
    (doubt,) = status.in_doubt
    scheduled = next(e for e in h.events(run) if isinstance(e, ToolCallScheduled) and e.tool == "charge")
    assert (doubt.name, doubt.position, doubt.idempotency_key) == ("charge", 1, scheduled.idempotency_key)
    assert [(c.tool, c.compensates, c.state) for c in status.compensations] == [
        ("refund_charge", 1, "completed")
    ]
    assert Replayer(app=app).replay(h.events(run)).ok
    await h.stop_all()
