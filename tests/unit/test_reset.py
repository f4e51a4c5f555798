"""Unit tests of a reset's cut and seed, and of a reset run's replay and keys (pure logic)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    RunCompleted,
    RunStarted,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.replay.reset import SeedError, cut, decode_seed, encode_seed
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive

pytestmark = pytest.mark.unit


def make_app() -> App:
    app = App("reset")

    @app.model("planner")
    def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        return {}

    @app.tool("refund", effect=True, key_args=("order", "amount"))
    def refund(order: str, amount: float, reason: str, *, idempotency_key: str) -> dict[str, Any]:
        return {}

    @app.tool("lookup")
    def lookup(order: str) -> dict[str, Any]:
        return {}

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        plan = await ctx.model("planner", messages=[{"role": "user", "content": "go"}])
        await ctx.tool("refund", order=request["order"], amount=41.6, reason=str(plan))
        found = await ctx.tool("lookup", order=request["order"])
        return {"plan": plan, "found": found}

    return app


def started(run_id: str, key_root: str | None = None) -> RunStarted:
    return RunStarted(
        run_id=run_id,
        seq=1,
        occurred_at=1,
        workflow="wf",
        input=json.dumps({"order": "48211"}),
        command_offset=0,
        key_root=key_root,
    )


def answer(command: Intent) -> Event:
    cls = ModelCallCompleted if command.kind == "model" else ToolCallCompleted
    return cls(run_id="", position=command.position, result=json.dumps({"at": command.position}))


def original_run() -> list[Event]:
    machine = RunMachine(make_app(), started("r1"), Stamp(itertools.count(100).__next__, "w1", 0))
    machine.begin()
    return drive(machine, answer, [started("r1")])


def reset_run(history: list[Event], position: int, key_root: str | None) -> RunMachine:
    """What the worker does with a reset submission: copies after RunStarted, replay, go live."""
    copies = decode_seed(encode_seed(cut(history, position)), position)
    start = started("r2", key_root)
    machine = RunMachine(make_app(), start, Stamp(itertools.count(900).__next__, "w2", 5))
    machine.begin([start, *copies])
    machine.replay(copies)
    machine.finish_replay()
    return machine


def test_the_cut_keeps_what_came_before_the_position_in_log_order() -> None:
    history = original_run()
    kept = cut(history, 3)
    assert [(e.type, getattr(e, "position", None)) for e in kept] == [
        ("ModelCallScheduled", 1),
        ("ModelCallCompleted", 1),
        ("ToolCallScheduled", 2),
        ("ToolCallCompleted", 2),
    ]
    assert not any(isinstance(e, (RunStarted, RunCompleted)) for e in cut(history, 99))
    with pytest.raises(SeedError, match="1 or more"):
        cut(history, 0)


def test_the_seed_round_trips_every_field_but_the_new_runs_envelope() -> None:
    kept = cut(original_run(), 3)
    back = decode_seed(encode_seed(kept), 3)
    assert [type(e) for e in back] == [type(e) for e in kept]
    for before, after in zip(kept, back, strict=True):
        assert after.occurred_at == before.occurred_at  # times kept: ctx.now() replays as it ran
        assert after.run_id == "" and after.seq == 0  # the new run's writer stamps these
        if isinstance(before, ToolCallScheduled):
            assert isinstance(after, ToolCallScheduled) and after.idempotency_key == before.idempotency_key


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        ("not json", "not JSON"),
        ('{"type": "ModelCallScheduled"}', "JSON array"),
        ('[{"type": "RunCompleted", "result": "{}"}]', "not a copyable event"),
        ('[{"type": "ToolCallCompleted", "position": 3, "result": "{}"}]', "position 3, not before 3"),
        ('[{"type": "ToolCallCompleted", "position": 1, "bogus": 1}]', "ToolCallCompleted"),
    ],
)
def test_a_bad_seed_is_refused_with_the_reason(seed: str, message: str) -> None:
    with pytest.raises(SeedError, match=message):
        decode_seed(seed, 3)


def test_a_reset_run_replays_the_copies_and_runs_live_only_from_the_position() -> None:
    history = original_run()
    machine = reset_run(history, 3, key_root="r1")
    assert machine.active and not machine.in_doubt
    _, ready = machine.drain()
    assert [(c.kind, c.name, c.position) for c in ready] == [("tool", "lookup", 3)]  # no model call again


def test_an_effect_a_reset_repeats_keeps_its_original_key() -> None:
    history = original_run()
    (refund,) = [e for e in history if isinstance(e, ToolCallScheduled) and e.tool == "refund"]
    assert not any(isinstance(e, ModelCallScheduled) and e.position > 1 for e in history)
    _, ready = reset_run(history, 2, key_root="r1").drain()  # the refund runs again
    assert [(c.name, c.key) for c in ready] == [("refund", refund.idempotency_key)]
    _, ready = reset_run(history, 2, key_root=None).drain()  # keyed by its own run: a new key
    assert ready[0].key != refund.idempotency_key
