"""The door into a run (runtime.workflow.activation): a run driven by activate gives the same records
as its steps taken one by one, recovery is a Wake, and no module outside the workflow reads the machine."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from runtime.errors import AgentlogError
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    RunStarted,
    SignalReceived,
    TimerFired,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.workflow.activation import (
    NO_BLOBS,
    Cancel,
    Completion,
    Deliver,
    Park,
    RunInstance,
    TimerDue,
    Wake,
)
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive
from support.services import ROOT

pytestmark = pytest.mark.unit


def make_app() -> App:
    app = App("t")

    @app.model("planner")
    def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {"ok": True}

    @app.tool("lookup")
    def lookup(order: str) -> dict[str, Any]:
        return {}

    @app.tool("refund", effect=True, key_args=("order", "amount"))
    def refund(order: str, amount: float, reason: str, *, idempotency_key: str) -> dict[str, Any]:
        return {}

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        plan = await ctx.model("planner", messages=[{"role": "user", "content": "go"}], prompt_version="v1")
        found = await ctx.tool("lookup", order=request["order"])
        await ctx.tool("refund", order=request["order"], amount=41.6, reason=f"because {plan}")
        return {"plan": plan, "found": found}

    return app


class Clock:
    def __init__(self) -> None:
        self.tick = 1000

    def __call__(self) -> int:
        self.tick += 1
        return self.tick


def started() -> RunStarted:
    return RunStarted(
        run_id="r1",
        seq=1,
        occurred_at=1,
        workflow="wf",
        input=json.dumps({"order": "48211"}),
        command_offset=0,
    )


def result_for(command: Intent) -> Event:
    if command.kind == "model":
        return ModelCallCompleted(run_id="r1", position=command.position, result=json.dumps({"n": 1}))
    return ToolCallCompleted(
        run_id="r1", position=command.position, result=json.dumps({"at": command.position})
    )


def live_run(app: App, crash_after: int | None = None) -> list[Event]:
    """The run driven step by step (begin, record, drain), as the worker did before the door."""
    machine = RunMachine(app, started(), Stamp(Clock(), "w1", 0))
    machine.begin()
    return drive(machine, result_for, [started()], crash_after)


def activated(app: App, history: list[Event] | None = None, crash_after: int | None = None) -> list[Event]:
    """What a worker appends: wake the run (on ``history``, if any), then deliver each intent's outcome."""
    run: RunInstance = RunMachine(app, started(), Stamp(Clock(), "w1" if history is None else "w2", 0))
    completion = run.activate(Wake(history or ()))
    appended = list(history or [started()])
    answered = 0
    pending = [completion]
    while pending:
        completion = pending.pop(0)
        appended += completion.records
        for intent in completion.intents:
            if crash_after is not None and answered >= crash_after:
                return appended
            answered += 1
            pending.append(run.activate(Deliver(result_for(intent))))
    return appended


def test_a_live_run_through_the_door_appends_what_its_steps_appended() -> None:
    assert activated(make_app()) == live_run(make_app())


def test_a_run_woken_on_its_history_after_a_crash_reruns_the_call_in_flight_in_doubt() -> None:
    history = live_run(make_app(), crash_after=2)
    run = RunMachine(make_app(), started(), Stamp(Clock(), "w2", 99))
    woken = run.activate(Wake(history))
    assert woken.records == []
    assert [(i.name, i.position, i.in_doubt) for i in woken.intents] == [("refund", 3, True)]
    assert [(d.kind, d.position) for d in woken.view.in_doubt] == [("tool", 3)]
    assert woken.view.active


def test_a_crash_at_any_point_then_a_wake_ends_with_the_records_of_a_run_never_interrupted() -> None:
    whole = live_run(make_app())
    for crash_after in range(3):
        history = activated(make_app(), crash_after=crash_after)
        recovered = activated(make_app(), history)
        assert [(e.type, getattr(e, "position", None)) for e in recovered] == [
            (e.type, getattr(e, "position", None)) for e in whole
        ]


def test_an_offline_wake_reports_a_recorded_command_the_code_never_reached() -> None:
    history = live_run(make_app())
    shorter = App("t")

    @shorter.model("planner")
    def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {}

    @shorter.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.model("planner", messages=[{"role": "user", "content": "go"}], prompt_version="v1")

    view = (
        RunMachine(shorter, started(), Stamp(Clock(), "replayer", -1))
        .activate(Wake(history[:3], go_live=False))
        .view
    )
    assert view.divergence is None and view.status == "running"  # offline: its ending is not decided
    view = (
        RunMachine(shorter, started(), Stamp(Clock(), "replayer", -1))
        .activate(
            Wake(history[:4], go_live=False)  # the lookup scheduled, which this code never issues
        )
        .view
    )
    assert view.divergence is not None and view.divergence.position == 2
    assert view.divergence.expected == "a recorded command"


def timer_app() -> App:
    app = App("timers")

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.wait_signal("go", timeout=60)

    return app


def test_a_timer_due_after_its_signal_came_records_nothing() -> None:
    run = RunMachine(timer_app(), started(), Stamp(Clock(), "w1", 0))
    (timeout,) = run.activate(Wake()).intents
    assert run.waiting()
    signalled = run.activate(Deliver(SignalReceived(run_id="r1", name="go", payload="1", command_offset=3)))
    assert signalled.view.status == "completed" and signalled.view.result == 1
    assert run.activate(TimerDue(timeout.position)).records == []


def test_a_timer_due_while_the_run_waits_fires_it() -> None:
    run = RunMachine(timer_app(), started(), Stamp(Clock(), "w1", 0))
    (timeout,) = run.activate(Wake()).intents
    fired = run.activate(TimerDue(timeout.position))
    assert [type(e) for e in fired.records[:1]] == [TimerFired]
    assert fired.view.status == "failed"  # the workflow let the TimeoutError out


def test_cancel_and_park_end_the_run_once() -> None:
    run = RunMachine(timer_app(), started(), Stamp(Clock(), "w1", 0))
    run.activate(Wake())
    cancelled = run.activate(Cancel("operator", 7))
    # The cancel recorded, raised at the workflow's await, which lets it out: the run ends cancelled.
    assert [e.type for e in cancelled.records] == ["SignalReceived", "RunCancelled"]
    assert not cancelled.view.active
    assert run.activate(Park("limit")).records == []


def test_the_view_is_one_object_until_something_in_it_changes() -> None:
    run = RunMachine(make_app(), started(), Stamp(Clock(), "w1", 0))
    first = run.activate(Wake())
    assert first.blobs is NO_BLOBS
    (call,) = first.intents
    second = run.activate(Deliver(result_for(call)))
    assert second.view is first.view  # a step allocates no view
    completion: Completion = second
    while completion.intents:
        completion = run.activate(Deliver(result_for(completion.intents[0])))
    assert completion.view is not first.view and completion.view.status == "completed"
    assert any(isinstance(e, ToolCallScheduled) for e in second.records)
    assert json.loads(json.dumps(completion.view.result)) == completion.view.result


def test_new_run_is_a_run_instance_not_yet_activated() -> None:
    run = new_run(make_app(), started(), Stamp(Clock(), "w1", 0))
    assert run.view.active and run.view.run_id == "r1" and not run.view.dry_run
    assert [e.type for e in run.activate(Wake()).records] == ["ModelCallScheduled"]


def test_a_run_is_woken_once() -> None:
    run = new_run(make_app(), started(), Stamp(Clock(), "w1", 0))
    run.activate(Wake())
    with pytest.raises(AgentlogError, match="woken once"):
        run.activate(Wake())


def test_nothing_outside_the_workflow_package_imports_the_machine() -> None:
    """The import-linter contract runs-behind-one-door, read here too: lazy imports included."""
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        if path.is_relative_to(ROOT / "runtime" / "workflow"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "runtime.workflow.machine", f"{path}:{node.lineno}"
            elif isinstance(node, ast.Import):
                assert "runtime.workflow.machine" not in [a.name for a in node.names], f"{path}:{node.lineno}"
