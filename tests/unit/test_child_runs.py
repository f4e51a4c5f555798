"""Child runs on the in-memory log: ids derived from the parent, one start per child on replay,
endings recorded once, an unknown child workflow refused, and the parent-close policy."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.errors import ChildRunFailed
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import (
    ChildRunEnded,
    ChildRunScheduled,
    RunStarted,
)
from runtime.log.schemas.serde import Serde
from runtime.worker.children import rejection_command
from runtime.worker.loop import Worker
from runtime.workflow.activation import Deliver, Wake
from runtime.workflow.app import App
from runtime.workflow.budget import Budget
from runtime.workflow.children import child_run_id
from runtime.workflow.context import Context
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Stamp
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def family_app() -> App:
    app = App("family")

    @app.tool("double")
    def double(n: int) -> int:
        return n * 2

    @app.workflow("reader")
    async def reader(ctx: Context, n: int) -> int:
        return int(await ctx.tool("double", n=n))

    @app.workflow("broken")
    async def broken(ctx: Context, n: int) -> int:
        raise ValueError(f"no page {n}")

    @app.workflow("waiter")
    async def waiter(ctx: Context, n: int) -> Any:
        return await ctx.wait_signal("go")

    @app.workflow("fan_out")
    async def fan_out(ctx: Context, n: int) -> list[int]:
        return list(await ctx.gather(*(ctx.child("reader", i) for i in range(n))))

    @app.workflow("catches")
    async def catches(ctx: Context, n: int) -> str:
        try:
            await ctx.child("broken", n)
        except ChildRunFailed as error:
            return str(error)
        return "no error"

    @app.workflow("unknown_child")
    async def unknown_child(ctx: Context, n: int) -> Any:
        return await ctx.child("nobody", n)

    @app.workflow("two_policies")
    async def two_policies(ctx: Context, n: int) -> Any:
        ctx.start_child("waiter", 1)  # parent_close="cancel" by default
        ctx.start_child("waiter", 2, parent_close="run_on")
        return await ctx.wait_signal("never")

    @app.workflow("signals_child")
    async def signals_child(ctx: Context, n: int) -> Any:
        handle = ctx.start_child("waiter", n)
        await handle.signal("go", {"from": "parent"})
        return await handle

    return app


def test_a_child_id_derives_from_the_parent_and_the_position_never_the_clock() -> None:
    assert child_run_id("run-1", 3) == "run-1.child3"
    assert child_run_id("run-1", 3) == child_run_id("run-1", 3)
    assert child_run_id("run-1", 4) != child_run_id("run-1", 3)
    assert child_run_id("run-2", 3) != child_run_id("run-1", 3)


async def test_three_children_gathered_each_start_once_and_the_parent_gets_their_results() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("fan_out", 3).run_id
    status = await h.ended(run)
    assert status.status == "completed", status
    assert h.client.run(run).result(timeout=1) == [0, 2, 4]
    parent = h.events(run)
    starts = [e for e in parent if isinstance(e, ChildRunScheduled)]
    ends = [e for e in parent if isinstance(e, ChildRunEnded)]
    assert [e.child_run_id for e in starts] == [child_run_id(run, p) for p in (1, 2, 3)]
    assert sorted(e.child_run_id for e in ends) == [e.child_run_id for e in starts]
    assert {e.child_status for e in ends} == {"completed"}
    for start in starts:
        child = h.events(start.child_run_id)
        assert [e.type for e in child].count("RunStarted") == 1
        assert isinstance(child[0], RunStarted) and child[0].child_of == run
        assert h.status(start.child_run_id).status == "completed"
        assert h.status(start.child_run_id).parent_run_id == run
    children = status.children
    assert [(c.run_id, c.workflow, c.status) for c in children] == [
        (child_run_id(run, p), "reader", "completed") for p in (1, 2, 3)
    ]
    assert status.as_dict()["children"][0]["parent_close"] == "cancel"
    await h.stop_all()


async def test_a_replayed_parent_issues_no_second_start_and_resends_only_unended_children() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("fan_out", 3).run_id
    await h.ended(run)
    await h.stop_all()
    history = h.events(run)
    started = history[0]
    assert isinstance(started, RunStarted)
    stamp = Stamp(lambda: 0, "replayer", 0)
    # The whole history: nothing to record, nothing to send.
    whole = new_run(h.app, started, stamp).activate(Wake(history))
    assert whole.records == [] and whole.intents == []
    assert whole.view.status == "completed"
    # Cut after the three starts (a parent recovered while its children ran): the starts are sent
    # again (the children's partitions ignore ids they know), none is recorded again.
    cut = [e for e in history if not isinstance(e, ChildRunEnded) and e.type != "RunCompleted"]
    recovered = new_run(h.app, started, stamp)
    woken = recovered.activate(Wake(cut))
    assert [e.type for e in woken.records] == []
    assert sorted(i.key or "" for i in woken.intents) == [child_run_id(run, p) for p in (1, 2, 3)]
    assert recovered.waiting()  # a parent waiting on children only may be evicted
    # A child's ending delivered twice is recorded once.
    ended = ChildRunEnded(
        run_id=run,
        position=0,
        child_run_id=child_run_id(run, 2),
        child_status="completed",
        result="2",
        command_offset=7,
    )
    assert [e.type for e in recovered.activate(Deliver(ended)).records] == ["ChildRunEnded"]
    assert recovered.activate(Deliver(ended)).records == []


async def test_a_failed_child_raises_in_the_parent_naming_the_child_run() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("catches", 5).run_id
    assert (await h.ended(run)).status == "completed"
    message = h.client.run(run).result(timeout=1)
    assert child_run_id(run, 1) in message and "'broken'" in message and "no page 5" in message
    await h.stop_all()


async def test_a_child_of_an_unknown_workflow_fails_the_parent_with_a_terminal_error_naming_it() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("unknown_child", 1).run_id
    status = await h.ended(run)
    assert status.status == "failed"  # not parked
    failed = h.events(run)[-1]
    assert failed.type == "RunFailed"
    assert getattr(failed, "error_type", "") == "TerminalError"
    assert "'nobody' is not registered" in getattr(failed, "error", "")
    assert not any(isinstance(e, ChildRunScheduled) for e in h.events(run))
    await h.stop_all()


async def test_a_parent_signals_its_child_through_the_handle() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("signals_child", 1).run_id
    assert (await h.ended(run)).status == "completed"
    assert h.client.run(run).result(timeout=1) == {"from": "parent"}
    await h.stop_all()


async def test_a_cancelled_parent_cancels_its_cancel_policy_child_and_leaves_the_run_on_one() -> None:
    h = Harness(family_app())
    h.start()
    run = h.client.submit("two_policies", 0).run_id
    cancel_child, run_on_child = child_run_id(run, 1), child_run_id(run, 2)
    await until(
        lambda: h.status(cancel_child).status == "running" and h.status(run_on_child).status == "running",
        what="both children to start",
    )
    h.client.run(run).cancel("operator says stop")
    assert (await h.ended(run)).status == "cancelled"
    cancelled = await h.ended(cancel_child)
    assert cancelled.status == "cancelled"
    reason = getattr(h.events(cancel_child)[-1], "reason", "")
    assert run in reason and "cancelled" in reason
    assert h.status(run_on_child).status == "running"
    h.client.run(run_on_child).signal("go", "still here")
    assert (await h.ended(run_on_child)).status == "completed"
    await h.stop_all()


def waiting_app() -> App:
    app = App("family-waiting")

    @app.workflow("reader")
    async def reader(ctx: Context, n: int) -> int:
        await ctx.wait_signal("go")
        return n * 10

    @app.workflow("fan_out")
    async def fan_out(ctx: Context, n: int) -> list[int]:
        return list(await ctx.gather(*(ctx.child("reader", i) for i in range(1, n + 1))))

    return app


async def test_a_parent_waiting_on_children_is_evicted_and_woken_by_their_endings() -> None:
    h = Harness(waiting_app(), settings=Settings(partitions=1, run_cache_size=1))
    worker = h.start()
    run = h.client.submit("fan_out", 3).run_id
    children = [child_run_id(run, p) for p in (1, 2, 3)]
    await until(lambda: all(h.status(c).status == "running" for c in children), what="the children to start")
    await until(lambda: worker.executor.runs.in_memory() <= 1, what="the cache to evict the waiting runs")
    for child in children:
        h.client.run(child).signal("go", True)
    assert (await h.ended(run)).status == "completed"
    assert h.client.run(run).result(timeout=1) == [10, 20, 30]
    assert [e.type for e in h.events(run)].count("ChildRunEnded") == 3
    await h.stop_all()


async def test_a_parent_taken_over_by_another_worker_starts_no_child_twice() -> None:
    h = Harness(waiting_app())
    h.start("w1", checkpoint_interval_s=0.05)  # checkpoints list the waiting parent
    run = h.client.submit("fan_out", 2).run_id
    children = [child_run_id(run, p) for p in (1, 2)]
    await until(lambda: all(h.status(c).status == "running" for c in children), what="the children to start")
    await until(
        lambda: any(run in c.waiting_runs for c in h.checkpoints()), what="a checkpoint listing the parent"
    )
    await h.stop("w1")
    h.start("w2")
    # A repeated submission of a child (a parent's resend after a crash) starts nothing.
    h.client.submit("reader", 1, run_id=children[0])
    for child in children:
        h.client.run(child).signal("go", True)
    assert (await h.ended(run)).status == "completed"
    assert h.client.run(run).result(timeout=1) == [10, 20]
    for child in children:
        assert h.types(child).count("RunStarted") == 1
    assert [e.type for e in h.events(run)].count("ChildRunScheduled") == 2
    await h.stop_all()


def budget_app() -> App:
    app = App("family-budget")

    @app.model("chat")
    async def chat(messages: list[dict[str, str]], **params: Any) -> dict[str, Any]:
        return {
            "model": "acme-small",
            "choices": [{"message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 10},
        }

    async def talk(ctx: Context, n: int) -> int:
        for turn in range(n):
            await ctx.model("chat", messages=[{"role": "user", "content": f"turn {turn}"}], max_tokens=20)
        return n

    @app.workflow("chatty")
    async def chatty(ctx: Context, n: int) -> int:
        return await talk(ctx, n)

    @app.workflow("delegating", budget=Budget(max_model_calls=3))
    async def delegating(ctx: Context, n: int) -> int:
        await ctx.child("chatty", 2)
        return await talk(ctx, n)

    return app


async def test_a_child_s_model_calls_count_toward_its_parent_s_budget() -> None:
    h = Harness(budget_app())
    h.start()
    within = h.client.submit("delegating", 1).run_id  # 2 calls of its child + 1 of its own: 3 of 3
    over = h.client.submit("delegating", 2).run_id  # the 4th call would pass the budget
    assert (await h.ended(within)).status == "completed"
    status = await h.ended(over)
    assert status.status == "failed", status
    assert "BudgetExceeded" in (status.reason or "") and "max_model_calls" in (status.reason or "")
    child = h.events(child_run_id(over, 1))[0]
    assert isinstance(child, RunStarted) and child.budget is not None  # a budgeted parent's child is budgeted
    assert h.status(within).budget is not None and h.status(within).budget.model_calls == 3  # type: ignore[union-attr]
    assert [(c.model_calls, c.tokens) for c in h.status(within).children] == [(2, 80)]
    await h.stop_all()


def test_a_child_s_input_and_result_are_sealed_in_the_log_when_contents_are_sealed() -> None:
    settings = Settings(partitions=2, seal_contents=True)
    app = App("family-sealed")
    marker = "MARKER-child-5c1e"

    @app.workflow("echo")
    async def echo(ctx: Context, text: str) -> str:
        return f"{text} echoed"

    @app.workflow("asks")
    async def asks(ctx: Context, text: str) -> str:
        return str(await ctx.child("echo", text))

    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(app, settings, log=log, serde=serde, worker_id="w", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    client = Client(settings, identity="t", log=log, serde=serde)
    try:
        assert client.submit("asks", marker).result(timeout=20) == f"{marker} echoed"
        topics = (settings.commands_topic, settings.events_topic)
        raw = b"".join(r.value or b"" for t in topics for p in range(2) for r in log.read(t, p))
        assert marker.encode() not in raw
    finally:
        client.close()
        worker.stop()
        thread.join(timeout=10)


async def test_a_child_that_continues_as_new_reaches_its_parent_through_its_successor() -> None:
    app = App("family-chain")

    @app.workflow("counter")
    async def counter(ctx: Context, n: int) -> int:
        if n < 3:
            ctx.continue_as_new(n + 1)
        return n * 100

    @app.workflow("waits_for_counter")
    async def waits_for_counter(ctx: Context, n: int) -> int:
        return int(await ctx.child("counter", n))

    h = Harness(app)
    h.start()
    run = h.client.submit("waits_for_counter", 1).run_id
    assert (await h.ended(run)).status == "completed"
    assert h.client.run(run).result(timeout=1) == 300
    last = h.status(child_run_id(run, 1)).continued_as
    assert last is not None and h.status(last).parent_run_id == run
    await h.stop_all()


async def test_a_fork_s_child_runs_dry_and_calls_no_effect() -> None:
    app = App("family-fork")
    refunds: list[str] = []

    @app.tool("lookup")
    def lookup(order: str) -> str:
        return f"{order} is late"

    @app.tool("refund", effect=True)
    def refund(order: str, *, idempotency_key: str) -> str:
        refunds.append(order)
        return f"refunded {order}"

    @app.workflow("refunder")
    async def refunder(ctx: Context, order: str) -> Any:
        return await ctx.tool("refund", order=order)

    @app.workflow("triage")
    async def triage(ctx: Context, order: str) -> Any:
        await ctx.tool("lookup", order=order)
        return await ctx.child("refunder", order)

    h = Harness(app)
    h.start()
    original = h.client.submit("triage", "A-1").run_id
    assert (await h.ended(original)).status == "completed"
    assert refunds == ["A-1"]
    fork = h.client.run(original).fork(2, {}).run_id
    assert (await h.ended(fork)).status == "completed"
    assert h.client.run(fork).result(timeout=1) == {"skipped": "fork"}
    assert refunds == ["A-1"]  # the fork's child called nothing
    assert (
        isinstance(started := h.events(child_run_id(fork, 2))[0], RunStarted)
        and started.fork_overrides == "{}"
    )
    await h.stop_all()


def test_a_rejected_child_raises_in_the_parent_with_the_rejection_s_reason() -> None:
    started = RunStarted(run_id="p", workflow="catches", input="3", command_offset=0, seq=1)
    parent = new_run(family_app(), started, Stamp(lambda: 0, "w", 0))
    woken = parent.activate(Wake())
    assert [e.type for e in woken.records] == ["ChildRunScheduled"]
    notice = rejection_command("p", child_run_id("p", 1), "bad budget: max_tokens")
    ended = ChildRunEnded(
        run_id="p",
        position=0,
        child_run_id=notice.child_run_id,
        child_status=notice.child_status,
        error_type=notice.error_type,
        error=notice.error,
        command_offset=9,
    )
    done = parent.activate(Deliver(ended))
    assert [e.type for e in done.records] == ["ChildRunEnded", "RunCompleted"]
    assert (
        done.view.result
        == f"child run {child_run_id('p', 1)} ('broken') rejected: RunRejected: bad budget: max_tokens"
    )
