"""The bridge between a hand-driven workflow and an asyncio agent loop driven inline on the
workflow's thread (runtime.integrations.bridge), with no framework: lock step, batches of
concurrent calls in issue order, replay, failures, an agent loop that waits for something else."""

from __future__ import annotations

import asyncio
import errno
import threading
from typing import Any

import pytest

from runtime.integrations import bridge
from runtime.integrations.agent_loop import AgentLoop
from runtime.integrations.bridge import AgentRun, current_run
from runtime.log.records.events import Event
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness

pytestmark = pytest.mark.unit


def bridged_app(ran: list[str]) -> App:
    app = App("bridge")

    @app.tool("slow")
    async def slow(name: str) -> str:
        await asyncio.sleep(0.05)
        ran.append(f"slow:{name}")
        return f"slow {name}"

    @app.tool("quick")
    async def quick(name: str) -> str:
        ran.append(f"quick:{name}")
        return f"quick {name}"

    @app.tool("broken", retry=RetryPolicy(attempts=1))
    def broken() -> str:
        raise ValueError("broken for good")

    @app.workflow("agent")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        async def agent_loop() -> dict[str, Any]:
            run = current_run()
            # on the workflow's own thread, its running loop the shared agent loop for the moment
            assert run is not None and threading.current_thread() is threading.main_thread()
            assert isinstance(asyncio.get_running_loop(), AgentLoop)
            first = await run.wait_for(ctx.tool("quick", name="first"))
            together = await asyncio.gather(
                run.wait_for(ctx.tool("slow", name="a")), run.wait_for(ctx.tool("quick", name="b"))
            )
            try:
                await run.wait_for(ctx.tool("broken"))
            except Exception as error:  # the agent sees a failed call as an exception
                failed = type(error).__name__
            return {"first": first, "together": together, "failed": failed}

        return await AgentRun(ctx, agent_loop, name="loop")

    @app.workflow("silent")
    async def silent(ctx: Context, request: dict[str, Any]) -> Any:
        async def agent_loop() -> None:
            await asyncio.Event().wait()  # waits for something that is not an agentlog call

        return await AgentRun(ctx, agent_loop, name="silent", step_timeout_s=600)

    @app.workflow("slow-thread")
    async def slow_thread(ctx: Context, request: dict[str, Any]) -> Any:
        async def agent_loop() -> None:
            release = threading.Event()
            try:  # a job of the loop's executor: waited for, but not past the step timeout
                await asyncio.to_thread(release.wait, 30)
            finally:
                release.set()

        return await AgentRun(ctx, agent_loop, name="slow-thread", step_timeout_s=0.3)

    return app


def serve(app: App, workflow: str) -> list[Event]:
    async def scenario() -> list[Event]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit(workflow, {}).run_id
        await harness.ended(run_id, timeout=10)
        await harness.stop_all()
        return harness.events(run_id)

    return asyncio.run(scenario())


def test_concurrent_calls_go_as_one_batch_in_issue_order_and_come_back_in_it() -> None:
    ran: list[str] = []
    events = serve(bridged_app(ran), "agent")
    assert events[-1].type == "RunCompleted", events[-1]
    assert getattr(events[-1], "result", "") == (
        '{"failed":"CallFailed","first":"quick first","together":["slow a","quick b"]}'
    )
    kinds = [(e.type, getattr(e, "args", None)) for e in events if e.type.startswith("ToolCall")]
    assert [k for k, _ in kinds[:6]] == [
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ToolCallScheduled",  # a and b issued together ...
        "ToolCallScheduled",
        "ToolCallCompleted",  # ... and run side by side: b answers first
        "ToolCallCompleted",
    ]
    assert ran == ["quick:first", "quick:b", "slow:a"]


def test_replay_gives_the_agent_loop_the_recorded_outcomes_without_calling() -> None:
    events = serve(bridged_app([]), "agent")
    ran: list[str] = []
    replayed = Replayer(app=bridged_app(ran)).replay(events)
    assert replayed.ok and replayed.result["together"] == ["slow a", "quick b"]
    assert ran == []


def test_an_agent_loop_waiting_on_something_nothing_can_wake_fails_the_run_at_once() -> None:
    # its step timeout is 600 s: the run fails because nothing can wake the agent, not by waiting
    events = serve(bridged_app([]), "silent")
    assert events[-1].type == "RunFailed"
    error = getattr(events[-1], "error", "")
    assert "agent run 'silent' neither issued a call nor ended, and nothing can wake it" in error


def test_an_agent_loop_waiting_on_a_thread_too_long_fails_the_run_at_its_step_timeout() -> None:
    events = serve(bridged_app([]), "slow-thread")
    assert events[-1].type == "RunFailed"
    assert "agent run 'slow-thread' neither issued a call nor ended within 0.3 s" in getattr(
        events[-1], "error", ""
    )


def test_an_agent_run_the_worker_has_no_descriptor_for_is_parked_naming_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_descriptors() -> AgentLoop:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(bridge, "acquire", no_descriptors)
    events = serve(bridged_app([]), "agent")
    assert events[-1].type == "RunParked", events[-1]  # not failed: the lack is the worker's
    assert "agent run 'loop' cannot start: the worker could not open its agent loop" in getattr(
        events[-1], "reason", ""
    )
    assert "Too many open files" in getattr(events[-1], "reason", "")
