"""A reset refuses to cut between a call's Scheduled record and its outcome (an unclean seam),
names the nearest clean seams, and with ``allow_in_doubt`` runs that call again in doubt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.cli.main import main
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    RunStarted,
    RunSubmitted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.replay.reset import UncleanSeam, clean_seams, cut, decode_seed, nearest_clean_seams
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def parallel_history(*, finished: bool = True) -> list[Event]:
    """A model call (1) and a tool call (2) in parallel, the tool answering first; then a tool (3)."""
    history: list[Event] = [
        RunStarted(run_id="r", workflow="wf", input="{}", command_offset=0),
        ModelCallScheduled(run_id="r", position=1, model="planner", args_hash="h1"),
        ToolCallScheduled(run_id="r", position=2, tool="lookup", args="{}", args_hash="h2"),
        ToolCallCompleted(run_id="r", position=2, result="{}"),
        ModelCallCompleted(run_id="r", position=1, result="{}"),
        ToolCallScheduled(run_id="r", position=3, tool="refund", args="{}", args_hash="h3"),
    ]
    if finished:
        history.append(ToolCallCompleted(run_id="r", position=3, result="{}"))
    return history


def test_a_cut_between_a_calls_scheduled_record_and_its_outcome_is_refused() -> None:
    history = parallel_history()
    with pytest.raises(UncleanSeam) as refused:
        cut(history, 2)
    error = refused.value
    assert (error.position, error.below, error.above) == (2, 1, 3)
    assert [(c.kind, c.name, c.position) for c in error.open_calls] == [("model", "planner", 1)]
    message = str(error)
    assert "position 2 is not a clean seam" in message and "model 'planner' at position 1" in message
    assert "--to 1 or --to 3" in message and "--allow-in-doubt" in message


def test_clean_seams_are_the_cuts_that_leave_no_call_open() -> None:
    assert clean_seams(parallel_history()) == [1, 3, 4]
    assert [e.type for e in cut(parallel_history(), 3)] == [
        "ModelCallScheduled",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ModelCallCompleted",
    ]
    # A call in flight at the end of the history: after it there is no clean seam.
    assert clean_seams(parallel_history(finished=False)) == [1, 3]
    assert nearest_clean_seams(parallel_history(finished=False), 4) == (3, None)
    with pytest.raises(UncleanSeam, match="Nearest clean seams: --to 3;"):
        cut(parallel_history(finished=False), 4)


def test_a_failed_attempt_is_not_an_outcome_but_a_final_failure_is() -> None:
    history: list[Event] = [
        ToolCallScheduled(run_id="r", position=1, tool="lookup", args="{}", args_hash="h"),
        ToolCallFailed(run_id="r", position=1, error_type="E", error="e", attempt=1, final=False),
        ToolCallCompleted(run_id="r", position=1, result="{}", attempt=2),
        ToolCallScheduled(run_id="r", position=2, tool="lookup", args="{}", args_hash="h"),
        ToolCallFailed(run_id="r", position=2, error_type="E", error="e", attempt=1, final=True),
    ]
    assert clean_seams(history[:2]) == [1]  # a retry was still to come
    assert clean_seams(history) == [1, 2, 3]


def test_allow_in_doubt_keeps_the_open_call_without_its_outcome() -> None:
    kept = cut(parallel_history(), 2, allow_in_doubt=True)
    assert [e.type for e in kept] == ["ModelCallScheduled"]


def gather_app(gate: asyncio.Event, planner_calls: list[int]) -> App:
    app = App("seams")

    @app.model("planner")
    async def planner(messages: list[dict[str, Any]], **params: Any) -> Any:
        planner_calls.append(len(planner_calls) + 1)
        await gate.wait()  # the test opens it once the lookup's result is recorded: they interleave
        return {"plan": "refund"}

    @app.tool("lookup")
    async def lookup(order: str) -> dict[str, Any]:
        return {"order": order}

    @app.workflow("wf")
    async def wf(ctx: Context, order: str) -> Any:
        plan, found = await ctx.gather(
            ctx.model("planner", messages=[{"role": "user", "content": order}]),
            ctx.tool("lookup", order=order),
        )
        return {"plan": plan, "found": found}

    return app


async def test_client_reset_refuses_an_unclean_seam_and_allow_in_doubt_names_the_call() -> None:
    planner_calls: list[int] = []
    gate = asyncio.Event()
    h = Harness(gather_app(gate, planner_calls))
    h.start()
    run = h.client.submit("wf", "A-7").run_id
    await until(lambda: "ToolCallCompleted" in h.types(run), what="the lookup's result")
    gate.set()
    assert (await h.ended(run)).status == "completed"
    assert h.types(run)[1:5] == [
        "ModelCallScheduled",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ModelCallCompleted",
    ]
    with pytest.raises(UncleanSeam, match=r"position 2 is not a clean seam.*--to 1 or --to 3"):
        h.client.run(run).reset(2)
    again = h.client.run(run).reset(2, allow_in_doubt=True).run_id
    status = await h.ended(again)
    assert status.status == "completed"
    assert [(c.kind, c.name, c.position) for c in status.in_doubt] == [("model", "planner", 1)]
    assert status.reset_from is not None and status.reset_from.position == 2
    assert len(planner_calls) == 2  # the open call ran again; the lookup was served from the copy
    await h.stop_all()


def test_the_cli_refuses_an_unclean_seam_and_resets_with_allow_in_doubt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    h = Harness(App("cli"))
    for event in parallel_history():
        h.log.append(h.settings.events_topic, 0, b"r", h.serde.encode(event)).result()
    monkeypatch.setattr("runtime.cli.runs._client", lambda settings, identity="client": h.client)
    assert main(["reset", "r", "--to", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentlog: position 2 is not a clean seam")
    assert "model 'planner' at position 1" in err and "--to 1 or --to 3" in err
    assert main(["reset", "r", "--to", "2", "--allow-in-doubt", "--run-id", "r2"]) == 0
    records = [h.serde.decode(r.value or b"", r.key) for r in h.log.read(h.settings.commands_topic, 0)]
    (submitted,) = [r for r in records if isinstance(r, RunSubmitted)]  # and the original's cancel
    assert submitted.run_id == "r2" and submitted.reset_position == 2
    assert [e.type for e in decode_seed(submitted.seed or "", 2)] == ["ModelCallScheduled"]
