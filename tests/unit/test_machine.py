"""Unit tests of the run state machine: live execution, replay, divergence (pure logic)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from runtime.errors import CallFailed
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    NonDeterminismDetected,
    RunCompleted,
    RunParked,
    RunStarted,
    SignalReceived,
    TimerFired,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive

pytestmark = pytest.mark.unit


def make_app(step_arg: int = 1) -> App:
    app = App("t")

    @app.model("planner")
    def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {"ok": True}

    @app.tool("lookup")
    def lookup(order: str, step: int) -> dict[str, Any]:
        return {}

    @app.tool("refund", effect=True, key_args=("order", "amount"))
    def refund(order: str, amount: float, reason: str, *, idempotency_key: str) -> dict[str, Any]:
        return {}

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        plan = await ctx.model("planner", messages=[{"role": "user", "content": "go"}], prompt_version="v1")
        found = await ctx.tool("lookup", order=request["order"], step=step_arg)
        await ctx.tool("refund", order=request["order"], amount=41.6, reason=f"because {plan}")
        return {"plan": plan, "found": found}

    return app


class Clock:
    def __init__(self) -> None:
        self.ticks = itertools.count(1000)

    def __call__(self) -> int:
        return next(self.ticks)


def started(run_id: str = "r1") -> RunStarted:
    return RunStarted(
        run_id=run_id,
        seq=1,
        occurred_at=1,
        workflow="wf",
        input=json.dumps({"order": "48211"}),
        command_offset=0,
    )


def live_run(app: App, crash_after: int | None = None) -> list[Event]:
    """Run the workflow live, answering every call; stop after `crash_after` results."""
    machine = RunMachine(app, started(), Stamp(Clock(), "w1", 0))
    machine.begin()
    return drive(machine, result_for, [started()], crash_after)


def result_for(command: Intent) -> Event:
    if command.kind == "model":
        return ModelCallCompleted(
            run_id="r1", position=command.position, result=json.dumps({"n": command.position})
        )
    return ToolCallCompleted(
        run_id="r1", position=command.position, result=json.dumps({"at": command.position})
    )


def test_live_run_records_scheduled_then_completed_and_finishes() -> None:
    history = live_run(make_app())
    types = [e.type for e in history]
    assert types == [
        "RunStarted",
        "ModelCallScheduled",
        "ModelCallCompleted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "RunCompleted",
    ]
    assert [e.seq for e in history] == list(range(1, 9))
    refund = history[5]
    assert isinstance(refund, ToolCallScheduled) and refund.effect and refund.idempotency_key


def test_replay_serves_recorded_results_and_reexecutes_only_the_in_flight_call() -> None:
    history = live_run(make_app(), crash_after=2)  # model and lookup answered; refund scheduled, in flight
    assert history[-1].type == "ToolCallScheduled"
    machine = RunMachine(make_app(), started(), Stamp(Clock(), "w2", 99))
    machine.begin(history)
    machine.replay(history)
    machine.finish_replay()
    events, ready = machine.drain()
    assert events == []  # nothing new to record: every command is in history
    assert [(c.kind, c.name, c.position, c.in_doubt) for c in ready] == [("tool", "refund", 3, True)]
    assert ready[0].key == history[-1].idempotency_key  # type: ignore[attr-defined]
    assert [(d.kind, d.position) for d in machine.in_doubt] == [("tool", 3)]


def test_idempotency_key_ignores_free_text_arguments_outside_key_args() -> None:
    first = live_run(make_app())
    keys = [e.idempotency_key for e in first if isinstance(e, ToolCallScheduled) and e.effect]
    assert len(keys) == 1
    again = live_run(make_app())
    assert keys == [e.idempotency_key for e in again if isinstance(e, ToolCallScheduled) and e.effect]


def test_divergent_arguments_park_the_run_naming_both_commands() -> None:
    history = live_run(make_app(step_arg=1), crash_after=2)
    machine = RunMachine(make_app(step_arg=2), started(), Stamp(Clock(), "w2", 99))
    machine.begin(history)
    machine.replay(history)
    machine.finish_replay()
    events, ready = machine.drain()
    assert ready == []
    assert machine.status == "parked"
    detected = [e for e in events if isinstance(e, NonDeterminismDetected)]
    assert len(detected) == 1 and detected[0].position == 2
    assert '"step":1' in detected[0].expected and '"step":2' in detected[0].issued
    assert isinstance(events[-1], RunParked)


def test_tool_failure_can_be_caught_by_the_workflow() -> None:
    app = App("t")

    @app.tool("flaky")
    def flaky() -> None: ...

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> str:
        try:
            await ctx.tool("flaky")
        except CallFailed as failure:
            return f"caught {failure.error_type}"
        return "no"

    machine = RunMachine(app, started(), Stamp(Clock(), "w", 0))
    machine.begin()
    _, ready = machine.drain()
    machine.record(
        ToolCallFailed(run_id="r1", position=ready[0].position, error_type="IOError", error="down", attempt=3)
    )
    events, _ = machine.drain()
    assert isinstance(events[-1], RunCompleted) and json.loads(events[-1].result) == "caught IOError"


def test_gather_timer_and_signal_replay_deterministically() -> None:
    app = App("t")

    @app.tool("t")
    def t(i: int) -> int:
        return i

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        a, b = await ctx.gather(ctx.tool("t", i=1), ctx.tool("t", i=2))
        await ctx.sleep(5)
        approval = await ctx.wait_signal("approval", timeout=60)
        return [a, b, approval, ctx.now().timestamp(), ctx.uuid().hex, ctx.random()]

    machine = RunMachine(app, started(), Stamp(Clock(), "w", 0))
    history: list[Event] = [started()]
    machine.begin()
    events, ready = machine.drain()
    history += events
    assert [c.position for c in ready] == [1, 2]
    # the second call completes first; the workflow resumes only when both are done
    history.append(machine.record(ToolCallCompleted(run_id="r1", position=2, result="2")))
    history.append(machine.record(ToolCallCompleted(run_id="r1", position=1, result="1")))
    events, ready = machine.drain()
    history += events[2:]
    assert isinstance(history[-1], TimerScheduled) and ready[0].kind == "timer"
    history.append(machine.record(TimerFired(run_id="r1", position=3)))
    history += machine.drain()[0][1:]
    history.append(
        machine.record(SignalReceived(run_id="r1", name="approval", payload='{"ok":true}', command_offset=7))
    )
    history += machine.drain()[0][1:]
    assert isinstance(history[-1], RunCompleted)
    live_result = json.loads(history[-1].result)
    assert live_result[:3] == [1, 2, {"ok": True}]

    replayed = RunMachine(app, started(), Stamp(Clock(), "w2", 5))
    replayed.begin(history)
    replayed.replay(history)
    replayed.finish_replay()
    assert replayed.status == "completed" and replayed.drain() == ([], [])
    assert replayed.result == live_result
