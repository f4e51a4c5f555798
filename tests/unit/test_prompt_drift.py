"""Prompt drift (seed 003) and patch markers on the pure machine: a model call's prompt is activity
input, a changed one is recorded and the recorded decision served; tool arguments, model names
and ``strict_prompts`` keep the full comparison."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    NonDeterminismDetected,
    PatchRecorded,
    PromptDrifted,
    RunCompleted,
    RunStarted,
    SignalReceived,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive

pytestmark = pytest.mark.unit


def po_app(
    *,
    prompt: str = "Draft a purchase order for {item}.",
    version: str = "v1",
    model: str = "drafter",
    quantity_arg: str = "quantity",
    strict: bool = False,
    patch: bool = False,
) -> App:
    app = App("po", strict_prompts=strict)

    @app.model(model)
    def drafter(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {"item": "paper"}

    @app.tool("compliance_check")
    def compliance_check(order: dict[str, Any]) -> bool:
        return True

    @app.tool("place_order", effect=True)
    def place_order(order: dict[str, Any], quantity: int, *, idempotency_key: str) -> str:
        return "placed"

    @app.workflow("purchase")
    async def purchase(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        # Decided before the first command: a run recorded before the marker keeps the old path
        # even though it reaches the check live, after the approval.
        compliance = patch and ctx.patched("compliance-check")
        draft = await ctx.model(
            model,
            messages=[{"role": "user", "content": prompt.format(item=request["item"])}],
            prompt_version=version,
            temperature=0,
        )
        approval = await ctx.wait_signal("approve")
        if compliance:
            await ctx.tool("compliance_check", order=draft)
        args = {quantity_arg: approval["quantity"]} if quantity_arg == "quantity" else {"quantity": 0}
        placed = await ctx.tool("place_order", order=draft, **args)
        return {"draft": draft, "placed": placed}

    return app


class Clock:
    def __init__(self) -> None:
        self.ticks = itertools.count(1000)

    def __call__(self) -> int:
        return next(self.ticks)


STARTED = RunStarted(
    run_id="p204",
    seq=1,
    occurred_at=1,
    workflow="purchase",
    input=json.dumps({"item": "paper"}),
    command_offset=0,
)


def answer(command: Intent) -> Event:
    if command.kind == "model":
        return ModelCallCompleted(run_id="p204", position=command.position, result=json.dumps({"n": 1}))
    return ToolCallCompleted(run_id="p204", position=command.position, result=json.dumps(True))


def waiting_history(app: App) -> list[Event]:
    """Monday: drafted under ``app`` and now waiting for the approval."""
    machine = RunMachine(app, STARTED, Stamp(Clock(), "w1", 0))
    machine.begin()
    return drive(machine, answer, [STARTED])


def resume(app: App, history: list[Event], signal: bool = True) -> tuple[RunMachine, list[Event]]:
    """Friday: a worker running ``app`` replays ``history``, goes live and gets the approval."""
    machine = RunMachine(app, STARTED, Stamp(Clock(), "w2", 7))
    machine.begin(history)
    machine.replay(history)
    machine.finish_replay()
    out = list(history)
    drive(machine, answer, out)
    if signal and machine.active:
        machine.record(
            SignalReceived(
                run_id="p204", name="approve", payload=json.dumps({"quantity": 3}), command_offset=5
            )
        )
        drive(machine, answer, out)
    return machine, out


def new_of(history: list[Event], full: list[Event]) -> list[Event]:
    return full[len(history) :]


def test_waiting_history_is_model_call_then_the_wait() -> None:
    history = waiting_history(po_app())
    assert [e.type for e in history] == ["RunStarted", "ModelCallScheduled", "ModelCallCompleted"]


def test_reworded_prompt_is_recorded_as_drift_and_the_recorded_decision_served() -> None:
    history = waiting_history(po_app())
    machine, full = resume(po_app(prompt="Draft a compliant purchase order for {item}."), history)
    assert machine.status == "completed" and machine.divergence is None
    assert machine.result["draft"] == {"n": 1}  # the recorded decision, not a new call
    added = new_of(history, full)
    drifted = [e for e in added if isinstance(e, PromptDrifted)]
    assert len(drifted) == 1
    assert (drifted[0].position, drifted[0].model) == (1, "drafter")
    assert drifted[0].recorded_prompt_version == drifted[0].issued_prompt_version == "v1"
    assert drifted[0].recorded_args_hash != drifted[0].issued_args_hash
    assert drifted[0].seq == history[-1].seq + 1  # after the recorded events
    assert not any(e.type == "ModelCallScheduled" for e in added)
    assert [d.position for d in machine.drift] == [1]


def test_prompt_version_bump_alone_is_drift() -> None:
    history = waiting_history(po_app())
    machine, full = resume(po_app(version="v2"), history)
    assert machine.status == "completed"
    (drifted,) = [e for e in new_of(history, full) if isinstance(e, PromptDrifted)]
    assert (drifted.recorded_prompt_version, drifted.issued_prompt_version) == ("v1", "v2")


def test_changed_model_name_is_still_non_deterministic() -> None:
    history = waiting_history(po_app())
    machine, full = resume(po_app(model="drafter-large"), history)
    assert machine.status == "parked"
    added = new_of(history, full)
    assert not any(isinstance(e, PromptDrifted) for e in added)
    (detected,) = [e for e in added if isinstance(e, NonDeterminismDetected)]
    assert detected.position == 1 and "drafter-large" in detected.issued


def test_changed_tool_arguments_are_non_deterministic() -> None:
    old = po_app()
    machine, done = resume(old, waiting_history(old))
    assert machine.status == "completed"
    before_end = done[:-1]  # drop RunCompleted: place_order is recorded with its result
    assert isinstance(before_end[-2], ToolCallScheduled)
    changed, full = resume(po_app(quantity_arg="other"), before_end, signal=False)
    assert changed.status == "parked"
    (detected,) = [e for e in new_of(before_end, full) if isinstance(e, NonDeterminismDetected)]
    assert detected.position == before_end[-2].position  # type: ignore[attr-defined]


def test_strict_prompts_parks_a_reworded_prompt() -> None:
    history = waiting_history(po_app())
    machine, full = resume(po_app(version="v2", strict=True), history)
    assert machine.status == "parked"
    added = new_of(history, full)
    assert not any(isinstance(e, PromptDrifted) for e in added)
    (detected,) = [e for e in added if isinstance(e, NonDeterminismDetected)]
    assert detected.position == 1


def test_replaying_a_history_that_holds_the_drift_records_nothing_new() -> None:
    history = waiting_history(po_app())
    first = RunMachine(po_app(version="v2"), STARTED, Stamp(Clock(), "w2", 7))
    first.begin(history)
    first.replay(history)
    first.finish_replay()
    events, _ = first.drain()
    assert [e.type for e in events] == ["PromptDrifted"]
    with_drift = history + events
    again = RunMachine(po_app(version="v2"), STARTED, Stamp(Clock(), "w3", 8))
    again.begin(with_drift)
    again.replay(with_drift)
    again.finish_replay()
    assert again.drain()[0] == [] and again.divergence is None and again.active
    assert [d.position for d in again.drift] == [1]  # still reported, not recorded twice
    # The whole finished story replays clean offline too, reporting the drift.
    _, full = resume(po_app(version="v2"), with_drift)
    assert sum(isinstance(e, PromptDrifted) for e in full) == 1
    assert isinstance(full[-1], RunCompleted)
    result = Replayer(app=po_app(version="v2")).replay(full)
    assert result.ok and result.status == "completed"
    assert [(d.position, d.recorded_prompt_version, d.issued_prompt_version) for d in result.drift] == [
        (1, "v1", "v2")
    ]


def test_a_second_prompt_change_is_recorded_again() -> None:
    history = waiting_history(po_app())
    first = RunMachine(po_app(version="v2"), STARTED, Stamp(Clock(), "w2", 7))
    first.begin(history)
    first.replay(history)
    first.finish_replay()
    with_drift = history + first.drain()[0]
    again = RunMachine(po_app(version="v3"), STARTED, Stamp(Clock(), "w3", 8))
    again.begin(with_drift)
    again.replay(with_drift)
    again.finish_replay()
    (drifted,) = again.drain()[0]
    assert isinstance(drifted, PromptDrifted) and drifted.issued_prompt_version == "v3"


# ------------------------------------------------------------------------------- patch markers
def test_patched_on_an_old_history_keeps_the_old_branch_and_records_nothing() -> None:
    history = waiting_history(po_app())  # v1: no marker, waiting
    machine, full = resume(po_app(version="v2", patch=True), history)
    assert machine.status == "completed"
    added = new_of(history, full)
    assert not any(isinstance(e, PatchRecorded) for e in added)
    assert [e.tool for e in added if isinstance(e, ToolCallScheduled)] == ["place_order"]
    # and the finished old-path history replays deterministically under the new code
    assert Replayer(app=po_app(version="v2", patch=True)).replay(full).ok


def test_patched_on_a_new_history_takes_the_new_branch_and_records_the_marker() -> None:
    app = po_app(version="v2", patch=True)
    history = waiting_history(app)
    machine, full = resume(app, history)
    assert machine.status == "completed"
    assert [e.type for e in history][:2] == ["RunStarted", "PatchRecorded"]  # decided at the start
    added = new_of(history, full)
    assert not any(isinstance(e, (PatchRecorded, PromptDrifted, NonDeterminismDetected)) for e in added)
    (marker,) = [e for e in full if isinstance(e, PatchRecorded)]
    assert marker.patch_id == "compliance-check" and marker.position == 1
    assert [e.tool for e in added if isinstance(e, ToolCallScheduled)] == ["compliance_check", "place_order"]
    result = Replayer(app=app).replay(full)
    assert result.ok and result.drift == () and result.result == machine.result


def test_a_new_history_with_the_marker_does_not_replay_on_code_without_it() -> None:
    app = po_app(version="v2", patch=True)
    _, full = resume(app, waiting_history(app))
    result = Replayer(app=po_app(version="v2"), raise_on_replay_failure=False).replay(full)
    assert not result.ok and result.divergence is not None and result.divergence.position == 1


def test_shadow_replay_reports_drift_and_the_patches_an_in_flight_run_still_needs() -> None:
    from runtime.replay.upgrade import UpgradeReport, shadow_replay

    old_run = waiting_history(po_app())
    new_run = waiting_history(po_app(version="v2", patch=True))
    new_run = [dataclasses.replace(e, run_id="p205") for e in new_run]
    verdicts = shadow_replay(po_app(version="v2", patch=True), [old_run, new_run])
    assert [(v.run_id, v.verdict, v.detail) for v in verdicts] == [
        ("p204", "drift", "drift at 1: v1 -> v2"),
        ("p205", "ok", "ok"),
    ]
    report = UpgradeReport((), verdicts)
    assert report.ok
    assert report.patches_still_needed() == {"compliance-check": ("p204",)}
    assert report.patches_recorded() == {"compliance-check": ("p205",)}
    parked = shadow_replay(po_app(model="other"), [old_run])
    assert parked[0].verdict == "park" and parked[0].detail.startswith(
        "would park at position 1: history holds"
    )
    assert not UpgradeReport((), parked).ok
