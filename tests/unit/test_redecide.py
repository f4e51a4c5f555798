"""Unit tests of a re-decide point (``ctx.redecide``): check, re-ask, record, bound, replay (pure logic)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    Redecided,
    RunCompleted,
    RunFailed,
    RunParked,
    RunStarted,
    TimerFired,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive

pytestmark = pytest.mark.unit

GOAL = [{"role": "user", "content": "refund order 48211 if it is still open"}]
ALLOWED = {"refund", "hold"}


def make_app() -> App:
    app = App("redecide")

    @app.model("planner")
    def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {}

    @app.tool("order_open")
    def order_open(decision: dict[str, Any], order: str) -> bool:
        return True

    @app.tool("refund", effect=True, key_args=("order", "amount"))
    def refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
        return {}

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        decision = await ctx.model("planner", messages=GOAL)
        await ctx.sleep(4 * 3600)  # hours pass: the world may have moved
        decision = await ctx.redecide(
            decision,
            check="order_open",
            check_args={"order": request["order"]},
            model="planner",
            messages=GOAL,
            within=lambda d: d["action"] in ALLOWED and d["amount"] <= 41.60,
        )
        if decision["action"] == "refund":
            await ctx.tool("refund", order=request["order"], amount=decision["amount"])
        return decision

    @app.workflow("effect_check")
    async def effect_check(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.redecide({}, check="refund", model="planner", messages=GOAL)

    return app


def started(workflow: str = "wf") -> RunStarted:
    return RunStarted(
        run_id="r1",
        seq=1,
        occurred_at=1,
        workflow=workflow,
        input=json.dumps({"order": "48211"}),
        command_offset=0,
    )


Answer = Callable[[Intent], Any]


def scripted(decisions: list[dict[str, Any]], check: Any) -> Answer:
    """The planner's decisions in order; the check's answer."""
    planner = iter(decisions)

    def answer(command: Intent) -> Any:
        if command.kind == "model":
            return next(planner)
        if command.name == "order_open":
            return check
        return {"applied": True}

    return answer


def result_event(command: Intent, value: Any) -> Event:
    if command.kind == "timer":
        return TimerFired(run_id="r1", position=command.position)
    cls = ModelCallCompleted if command.kind == "model" else ToolCallCompleted
    return cls(run_id="r1", position=command.position, result=json.dumps(value))


def live(
    answer: Answer, workflow: str = "wf", stop_after: int | None = None
) -> tuple[RunMachine, list[Event]]:
    machine = RunMachine(make_app(), started(workflow), Stamp(itertools.count(1000).__next__, "w1", 0))
    machine.begin()
    return machine, drive(machine, lambda c: result_event(c, answer(c)), [started(workflow)], stop_after)


def recovered(history: list[Event], answer: Answer) -> tuple[RunMachine, list[Event]]:
    """A new worker: replay ``history``, then carry on live."""
    machine = RunMachine(make_app(), started(), Stamp(itertools.count(9000).__next__, "w2", 7))
    machine.begin(history)
    machine.replay(history)
    machine.finish_replay()
    return machine, drive(machine, lambda c: result_event(c, answer(c)), list(history))


ORIGINAL = {"action": "refund", "amount": 41.60}
REPLACEMENT = {"action": "hold", "amount": 0}


def calls(history: list[Event]) -> list[tuple[str, str]]:
    return [
        ("model", e.model) if isinstance(e, ModelCallScheduled) else ("tool", e.tool)
        for e in history
        if isinstance(e, (ModelCallScheduled, ToolCallScheduled))
    ]


def test_a_valid_decision_is_kept_after_one_recorded_lookup_and_no_model_call() -> None:
    machine, history = live(scripted([ORIGINAL], check=True))
    assert machine.status == "completed" and machine.result == ORIGINAL
    assert calls(history) == [("model", "planner"), ("tool", "order_open"), ("tool", "refund")]
    check = next(e for e in history if isinstance(e, ToolCallScheduled) and e.tool == "order_open")
    assert json.loads(check.args) == {"decision": ORIGINAL, "order": "48211"}  # the check sees the decision
    assert not any(isinstance(e, Redecided) for e in history)


def test_a_stale_decision_is_replaced_and_the_divergence_is_recorded() -> None:
    machine, history = live(
        scripted([ORIGINAL, REPLACEMENT], check={"valid": False, "reason": "order closed"})
    )
    assert machine.status == "completed" and machine.result == REPLACEMENT
    assert calls(history) == [("model", "planner"), ("tool", "order_open"), ("model", "planner")]  # no refund
    reask = [e for e in history if isinstance(e, ModelCallScheduled)][1]
    messages = machine.commands[reask.position].args["messages"]
    assert messages[:-1] == GOAL  # the same goal, plus a note naming the stale decision and why
    note = messages[-1]["content"]
    assert '{"action":"refund","amount":41.6}' in note and "order closed" in note
    (redecided,) = [e for e in history if isinstance(e, Redecided)]
    assert redecided.position == reask.position
    assert json.loads(redecided.original) == ORIGINAL
    assert json.loads(redecided.replacement) == REPLACEMENT
    assert json.loads(redecided.check) == {
        "tool": "order_open",
        "args": {"order": "48211"},
        "verdict": {"valid": False, "reason": "order closed"},
    }
    assert redecided.reason == "order closed"


def test_replay_serves_the_recorded_check_and_replacement_and_records_nothing_twice() -> None:
    answer = scripted([ORIGINAL, REPLACEMENT], check=False)
    _, history = live(answer)
    asked: list[Intent] = []

    def must_not_call(command: Intent) -> Any:
        asked.append(command)
        raise AssertionError("a completed run's replay called out")

    machine, replayed = recovered(history, must_not_call)
    assert machine.result == REPLACEMENT and not asked
    assert replayed == history  # not one event added: no second Redecided, no terminal twice


def test_a_crash_during_the_reask_re_executes_it_and_records_the_divergence_once() -> None:
    # Answered: decision, timer, check -> the re-ask is scheduled (durable) when the worker dies.
    _, history = live(scripted([ORIGINAL], check=False), stop_after=3)
    assert calls(history)[-1] == ("model", "planner")
    machine, after = recovered(history, scripted([REPLACEMENT], check=False))
    assert machine.status == "completed" and machine.result == REPLACEMENT
    assert [d.position for d in machine.in_doubt] == [4]  # the re-ask, re-executed
    assert len([e for e in after if isinstance(e, Redecided)]) == 1
    seqs = [e.seq for e in after]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_a_replacement_outside_its_bound_parks_the_run_instead_of_acting() -> None:
    machine, history = live(
        scripted(
            [ORIGINAL, {"action": "refund", "amount": 500.0}],
            check={"valid": False, "reason": "price changed"},
        )
    )
    assert machine.status == "parked"
    parked = next(e for e in history if isinstance(e, RunParked))
    assert "re-decided plan at position 4 leaves its bound" in parked.reason and "500.0" in parked.reason
    assert ("tool", "refund") not in calls(history)  # nothing acted on the out-of-bounds plan
    (redecided,) = [e for e in history if isinstance(e, Redecided)]
    assert "escalated" in redecided.reason
    assert not any(isinstance(e, RunCompleted) for e in history)


def test_a_check_must_be_a_read_only_tool() -> None:
    machine, history = live(scripted([], check=True), workflow="effect_check")
    failed = next(e for e in history if isinstance(e, RunFailed))
    assert "re-decide check 'refund' must be a registered read-only tool" in failed.error
    assert machine.status == "failed"
