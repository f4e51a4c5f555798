"""A cancel that reaches the workflow (runtime.workflow.cancellation) and run deadlines
(runtime.workflow.deadlines), on the machine alone: raised at the current await, caught, a cleanup
call recorded, the calls in flight stopped (an effect in doubt, with its key), and a replay of the
same history raising at the same point."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from runtime.log.records.events import (
    Event,
    RunCancelled,
    RunStarted,
    SignalReceived,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.replay.replayer import Replayer
from runtime.workflow.activation import Cancel, Completion, Deliver, TimerDue, Wake
from runtime.workflow.app import App, RegistrationError
from runtime.workflow.cancellation import RunCancelledError
from runtime.workflow.compensation import CANCEL_SIGNAL
from runtime.workflow.context import Context
from runtime.workflow.deadlines import (
    DEADLINE_POSITION,
    DeadlineError,
    absolute_ms,
    binding,
    describe,
)
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine

pytestmark = pytest.mark.unit


def cleanup_app(seen: list[str]) -> App:
    """charge (an effect), then a wait for a signal; a cancel is caught and a cleanup tool called.
    ``seen``: what the workflow code saw (as many times as it is replayed)."""
    app = App("unit-cancel")

    @app.tool("charge", effect=True)
    def charge(account: str, idempotency_key: str) -> str:
        return "charged"

    @app.tool("notify")
    def notify(text: str) -> str:
        return "sent"

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        try:
            await ctx.tool("charge", account="a-1")
            return await ctx.wait_signal("go")
        except RunCancelledError as cancel:
            seen.append(f"cancelled: {cancel.reason}")
            await ctx.tool("notify", text=f"stopped: {cancel.reason}")
            raise

    return app


class Clock:
    def __init__(self) -> None:
        self.tick = 1000

    def __call__(self) -> int:
        self.tick += 1
        return self.tick


def started(deadline: int | None = None) -> RunStarted:
    return RunStarted(
        run_id="r1", seq=1, occurred_at=1, workflow="wf", input="{}", command_offset=3, deadline=deadline
    )


def machine(app: App, deadline: int | None = None) -> RunMachine:
    return RunMachine(app, started(deadline), Stamp(Clock(), "w1", 0))


def complete(run: RunMachine, completion: Completion, log: list[Event]) -> Completion:
    """Append ``completion``'s records to ``log`` and answer each call it asked for (one level)."""
    log.extend(completion.records)
    for intent in completion.intents:
        if intent.kind == "tool":
            answered = run.activate(
                Deliver(ToolCallCompleted(run_id="r1", position=intent.position, result='"ok"'))
            )
            log.extend(answered.records)
            completion = answered
    return completion


def test_a_cancel_is_raised_at_the_await_caught_and_its_cleanup_recorded_then_replayed() -> None:
    seen: list[str] = []
    app = cleanup_app(seen)
    run = machine(app)
    log: list[Event] = [started()]
    complete(run, run.activate(Wake()), log)  # charge done; waits for "go"
    assert run.view.active and run.waiting()
    cancel = run.activate(Cancel("operator said stop", 11))
    types = [e.type for e in cancel.records]
    # The cancel first (a replay meets it at the same point), then the cleanup the code issued.
    assert types == ["SignalReceived", "ToolCallScheduled"]
    assert isinstance(cancel.records[0], SignalReceived) and cancel.records[0].name == CANCEL_SIGNAL
    assert seen == ["cancelled: operator said stop"]
    (cleanup,) = cancel.intents
    assert (cleanup.name, cleanup.args) == ("notify", {"text": "stopped: operator said stop"})
    complete(run, cancel, log)
    ending = log[-1]
    assert isinstance(ending, RunCancelled) and ending.reason == "operator said stop"
    assert ending.command_offset == 11 and not run.view.active

    # Replay: the same history raises at the same await, the cleanup is served from its record.
    seen.clear()
    replayed = Replayer(app=app).replay(log)
    assert replayed.ok and seen == ["cancelled: operator said stop"]
    woken = machine(app)
    again = woken.activate(Wake(log))
    assert again.records == [] and again.intents == [] and woken.view.status == "cancelled"


def test_the_call_in_flight_is_stopped_and_an_effect_named_in_doubt_with_its_key() -> None:
    seen: list[str] = []
    app = cleanup_app(seen)
    run = machine(app)
    first = run.activate(Wake())
    (charge,) = first.intents  # in flight: no outcome delivered
    scheduled = first.records[0]
    assert isinstance(scheduled, ToolCallScheduled) and scheduled.idempotency_key
    cancel = run.activate(Cancel("too late", 5))
    signal, stopped, *rest = cancel.records
    assert isinstance(signal, SignalReceived) and signal.name == CANCEL_SIGNAL
    assert isinstance(stopped, ToolCallFailed) and stopped.position == charge.position
    assert stopped.final and stopped.in_doubt and stopped.error_type == "RunCancelledError"
    assert scheduled.idempotency_key in stopped.error
    assert [(d.name, d.position, d.idempotency_key) for d in cancel.view.in_doubt] == [
        ("charge", 1, scheduled.idempotency_key)
    ]
    assert [e.type for e in rest] == ["ToolCallScheduled"]  # the cleanup, after the stop
    # A late outcome of the stopped call changes nothing: the worker cancels its task, and the
    # machine already holds its failure.
    assert seen == ["cancelled: too late"]


def test_code_that_returns_after_the_cancel_still_ends_cancelled_and_a_second_cancel_cuts_cleanup() -> None:
    app = App("unit-cancel-return")

    @app.tool("slow_cleanup")
    def slow_cleanup() -> str:
        return "done"

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        try:
            return await ctx.wait_signal("go")
        except RunCancelledError:
            await ctx.tool("slow_cleanup")
            return "cleaned"

    run = machine(app)
    run.activate(Wake())
    first = run.activate(Cancel("first", 1))
    assert [e.type for e in first.records] == ["SignalReceived", "ToolCallScheduled"]
    second = run.activate(Cancel("second", 2))
    types = [e.type for e in second.records]
    assert types == ["SignalReceived", "ToolCallFailed", "RunCancelled"]
    ending = second.records[-1]
    assert isinstance(ending, RunCancelled) and ending.reason == "first"
    assert run.activate(Cancel("third", 3)).records == []  # ended: nothing

    returns = machine(app)
    returns.activate(Wake())
    cancelled = returns.activate(Cancel("stop", 1))
    (cleanup,) = cancelled.intents
    done = returns.activate(
        Deliver(ToolCallCompleted(run_id="r1", position=cleanup.position, result='"done"'))
    )
    ending = done.records[-1]
    assert isinstance(ending, RunCancelled) and ending.reason == "stop"


def test_a_deadline_is_a_timer_of_the_run_that_cancels_it_with_a_reason_naming_it() -> None:
    seen: list[str] = []
    app = cleanup_app(seen)
    at = 1_800_000_000_000
    run = machine(app, deadline=at)
    woke = run.activate(Wake())
    deadline = [i for i in woke.intents if i.position == DEADLINE_POSITION]
    assert [(i.kind, i.fire_at) for i in deadline] == [("timer", at)]
    log: list[Event] = [started(at)]
    complete(run, woke, log)
    assert (DEADLINE_POSITION, at) in run.timers()  # what a run cache keeps of an evicted run
    fired = run.activate(TimerDue(DEADLINE_POSITION))
    signal = fired.records[0]
    assert isinstance(signal, SignalReceived) and signal.command_offset == 3  # the start's command
    reason = f"deadline {describe(at)} passed"
    assert json.loads(signal.payload) == reason and seen == [f"cancelled: {reason}"]
    assert run.timers() == () and run.activate(TimerDue(DEADLINE_POSITION)).records == []
    complete(run, fired, log)
    assert isinstance(log[-1], RunCancelled) and log[-1].reason == reason
    # A run woken from this history (a takeover, the run cache) does not arm the deadline again.
    assert machine(app, deadline=at).activate(Wake(log)).intents == []
    # One woken before its deadline (history without the cancel) arms it again.
    rewoken = machine(app, deadline=at).activate(Wake(log[:3]))
    assert [(i.position, i.fire_at) for i in rewoken.intents] == [(DEADLINE_POSITION, at)]


def test_deadlines_refused_or_bound() -> None:
    now = 1_000_000
    assert absolute_ms(5, now) == now + 5000
    assert absolute_ms(dt.timedelta(minutes=1), now) == now + 60_000
    with pytest.raises(DeadlineError, match="in the past"):
        absolute_ms(dt.datetime(2001, 1, 1, tzinfo=dt.UTC), now + 10**12)
    with pytest.raises(DeadlineError, match="no timezone"):
        absolute_ms(dt.datetime(2101, 1, 1), now)
    with pytest.raises(DeadlineError, match="positive"):
        absolute_ms(-3, now)
    assert binding(None, None, now) is None
    assert binding(now + 10, 50, now) == now + 10
    assert binding(now + 100, 50, now) == now + 50
    with pytest.raises(RegistrationError, match="deadline"):
        App("x").workflow("wf", deadline=0)(_noop)


async def _noop(ctx: Context, request: Any) -> None:
    return None
