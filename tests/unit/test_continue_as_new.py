"""Continue-as-new on the in-memory log: the successor starts once, the chain is recorded and
followed, and a run can continue before its history reaches the limit."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.client import RunError
from runtime.log.records.events import RunContinuedAsNew, RunStarted, RunSubmitted
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def chain_app(calls: list[int]) -> App:
    app = App("chain")

    @app.tool("work")
    def work(step: int) -> int:
        calls.append(step)
        return step * 10

    @app.workflow("counter")
    async def counter(ctx: Context, state: dict[str, Any]) -> dict[str, Any]:
        done = await ctx.tool("work", step=state["step"])
        total = state["total"] + done
        if state["step"] < state["last"]:
            ctx.continue_as_new({"step": state["step"] + 1, "last": state["last"], "total": total})
        return {"total": total, "steps": state["step"]}

    @app.workflow("until_near_limit")
    async def until_near_limit(ctx: Context, state: dict[str, Any]) -> dict[str, Any]:
        steps = state["steps"]
        while True:
            await ctx.tool("work", step=steps)
            steps += 1
            if ctx.history_near_limit():
                if state["generation"] < 2:
                    ctx.continue_as_new({"steps": steps, "generation": state["generation"] + 1})
                return {"steps": steps, "generation": state["generation"], "events": ctx.history_events()}

    return app


async def chain_ended(h: Harness, run: str) -> list[str]:
    """Wait (on the log) until the chain from ``run`` ends; its run ids. ``Client.result`` blocks,
    so it is called only once the worker in this loop is done."""
    await until(
        lambda: h.status(chain_of(h, run)[-1]).status not in ("running", "unknown"),
        what=f"the chain from {run} to end",
    )
    return chain_of(h, run)


def chain_of(h: Harness, first: str) -> list[str]:
    ids = [first]
    while (next_id := h.status(ids[-1]).continued_as) is not None:
        ids.append(next_id)
    return ids


async def test_a_chain_of_three_continuations_completes_and_follow_returns_the_last_result() -> None:
    calls: list[int] = []
    h = Harness(chain_app(calls))
    h.start()
    run = h.client.submit("counter", {"step": 1, "last": 4, "total": 0}).run_id
    ids = await chain_ended(h, run)
    assert len(ids) == 4  # three continuations
    assert [h.status(i).status for i in ids] == ["continued_as_new"] * 3 + ["completed"]
    assert [h.status(i).continued_from for i in ids] == [None, *ids[:-1]]
    assert [h.status(i).continued_as for i in ids] == [*ids[1:], None]
    assert calls == [1, 2, 3, 4]
    assert h.client.run(run).result(timeout=5, follow=True) == {"total": 100, "steps": 4}
    with pytest.raises(RunError) as raised:
        h.client.run(run).result(timeout=5)  # without follow: today's behaviour
    assert raised.value.status == "continued_as_new"
    started = [e for e in h.events(ids[1]) if isinstance(e, RunStarted)]
    assert len(started) == 1 and started[0].parent_run_id == run and started[0].reset_position == 0
    assert h.status(ids[1]).as_dict()["continued_from"] == run
    await h.stop_all()


async def test_a_repeated_submission_of_the_successor_starts_it_once() -> None:
    calls: list[int] = []
    h = Harness(chain_app(calls))
    h.start()
    run = h.client.submit("counter", {"step": 1, "last": 2, "total": 0}).run_id
    await chain_ended(h, run)
    assert h.client.run(run).result(timeout=5, follow=True) == {"total": 30, "steps": 2}
    ended = [e for e in h.events(run) if isinstance(e, RunContinuedAsNew)]
    assert len(ended) == 1
    successor = ended[0].new_run_id
    # The submission a recovering worker repeats: the same id, the same input.
    h.client._writer.send(
        RunSubmitted(run_id=successor, workflow="counter", input=ended[0].input, continued_from=run)
    )
    marker = h.client.submit("counter", {"step": 9, "last": 9, "total": 0}).run_id
    await h.ended(marker)
    assert [type(e) for e in h.events(successor)].count(RunStarted) == 1
    assert calls == [1, 2, 9]
    await h.stop_all()


async def test_a_restarted_worker_submits_a_successor_whose_submission_was_lost() -> None:
    """The crash between the two records, on the in-memory log: RunContinuedAsNew is durable but
    the worker never submits the successor (its submit is disabled); the next owner does, once."""
    calls: list[int] = []
    h = Harness(chain_app(calls))
    w1 = h.start("w1")
    lost: list[str] = []
    w1.executor.continuer.submit = lambda owned, ended, *_: lost.append(ended.new_run_id)  # type: ignore[method-assign]
    run = h.client.submit("counter", {"step": 1, "last": 2, "total": 0}).run_id
    await until(lambda: lost, what="the successor's submission to be due")
    await h.stop("w1")
    assert h.status(run).status == "continued_as_new"
    successor = h.status(run).continued_as
    assert successor == lost[0] and h.status(successor).status == "unknown"
    h.start("w2")
    await chain_ended(h, run)
    assert h.client.run(run).result(timeout=5, follow=True) == {"total": 30, "steps": 2}
    assert [type(e) for e in h.events(successor)].count(RunStarted) == 1
    assert calls == [1, 2]
    # A third owner reads the old run again (no checkpoint passed it) and submits again: ignored.
    await h.stop("w2")
    h.start("w3")
    marker = h.client.submit("counter", {"step": 9, "last": 9, "total": 0}).run_id
    await h.ended(marker)
    assert [type(e) for e in h.events(successor)].count(RunStarted) == 1
    assert calls == [1, 2, 9]
    await h.stop_all()


async def test_a_checkpoint_lists_a_run_whose_successor_is_not_submitted_yet() -> None:
    """A checkpoint that covers the RunContinuedAsNew still lists the run until its successor's
    submission is acknowledged, so the next owner reads it and submits."""
    calls: list[int] = []
    h = Harness(chain_app(calls))
    w1 = h.start("w1", checkpoint_interval_s=0.0)
    lost: list[str] = []
    w1.executor.continuer.submit = lambda owned, ended, *_: lost.append(ended.new_run_id)  # type: ignore[method-assign]
    run = h.client.submit("counter", {"step": 1, "last": 2, "total": 0}).run_id
    await until(lambda: lost, what="the successor's submission to be due")
    ended_at = next(e.offset for e in h.client.run(run).events() if isinstance(e.event, RunContinuedAsNew))
    checkpoint = await until(
        lambda: next((c for c in h.checkpoints() if c.covered_offset > ended_at), None),
        what="a checkpoint covering the RunContinuedAsNew",
    )
    assert run in checkpoint.active_runs
    await h.stop("w1")
    h.start("w2")
    await chain_ended(h, run)
    assert h.status(lost[0]).status == "completed" and calls == [1, 2]
    await h.stop_all()


async def test_history_near_limit_lets_a_run_continue_before_the_limit_parks_it() -> None:
    calls: list[int] = []
    h = Harness(chain_app(calls))
    h.settings = h.settings.model_copy(update={"history_warn_events": 7, "history_limit_events": 12})
    h.start()
    run = h.client.submit("until_near_limit", {"steps": 0, "generation": 0}).run_id
    await chain_ended(h, run)
    result = h.client.run(run).result(timeout=5, follow=True)
    ids = chain_of(h, run)
    assert len(ids) == 3 and result["generation"] == 2
    # RunStarted, then two events a step: past 7 after the third step's result (seq 7).
    assert result == {"steps": 9, "generation": 2, "events": 7}
    assert all(h.status(i).events < 12 for i in ids)
    await h.stop_all()
