"""Agent runs as tasks on the thread's shared agent loop (runtime.integrations.agent_loop), driven
by hand as the run machine drives a workflow: two runs interleave, closing a waiting run ends and
frees its task, anyio and sniffio see a real asyncio task, and the worker's uvloop is restored."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, cast

import anyio
import pytest
import sniffio
import uvloop

from runtime.integrations.agent_loop import AgentLoop
from runtime.integrations.bridge import AgentRun, current_run
from runtime.workflow.context import Context
from runtime.workflow.futures import DurableFuture

pytestmark = pytest.mark.unit

_NO_CTX = cast(Context, None)  # these agents issue no commands: they await futures made here


class Driven:
    """One agent run's ``__await__`` stepped by hand: ``send`` gives the awaited futures' outcome
    and returns the next future the run waits on (or its end)."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, Any]], name: str) -> None:
        self.run: AgentRun[Any] = AgentRun(_NO_CTX, start, name=name)
        self._steps: Generator[Any, None, Any] = self.run.__await__()
        self.result: Any = None
        self.ended = False

    def send(self) -> DurableFuture | None:
        try:
            return cast(DurableFuture, self._steps.send(None))
        except StopIteration as stop:
            self.result, self.ended = stop.value, True
            return None

    def close(self) -> None:
        self._steps.close()


def test_two_agent_runs_interleave_on_one_loop_each_with_its_own_state() -> None:
    futures: dict[str, list[DurableFuture]] = {"a": [], "b": []}
    loops: dict[str, asyncio.AbstractEventLoop] = {}

    def agent(name: str) -> Callable[[], Coroutine[Any, Any, list[Any]]]:
        async def loop_of_agent() -> list[Any]:
            run = current_run()
            assert run is not None and run.name == name
            loops[name] = asyncio.get_running_loop()
            got = []
            for _ in range(2):
                future = DurableFuture(len(futures[name]))
                futures[name].append(future)
                got.append(await run.wait_for(future))
                assert current_run() is run  # each task keeps its own context across the other's turns
            return [name, *got]

        return loop_of_agent

    a, b = Driven(agent("a"), "a"), Driven(agent("b"), "b")
    first_a = a.send()
    first_b = b.send()  # b starts while a waits
    assert first_a is futures["a"][0] and first_b is futures["b"][0]
    assert loops["a"] is loops["b"] and isinstance(loops["a"], AgentLoop)
    assert asyncio.events._get_running_loop() is None  # the thread's loop restored between turns

    first_b.set_result("b1")
    second_b = b.send()  # b goes on; a's task stays suspended on its undelivered outcome
    assert second_b is futures["b"][1] and not first_a.done
    first_a.set_result("a1")
    second_a = a.send()
    assert second_a is futures["a"][1]
    second_a.set_result("a2")
    assert a.send() is None and a.result == ["a", "a1", "a2"]
    second_b.set_result("b2")
    assert b.send() is None and b.result == ["b", "b1", "b2"]
    assert loops["a"].is_closed()  # the last agent run out closed the loop


def test_closing_a_waiting_agent_run_cancels_its_task_and_frees_it() -> None:
    cleaned: list[str] = []
    tasks: list[weakref.ref[asyncio.Task[Any]]] = []

    async def waits_forever() -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(weakref.ref(task))
        run = current_run()
        assert run is not None
        try:
            await run.wait_for(DurableFuture(0))  # a signal that never comes
        finally:
            cleaned.append("finally ran")

    other = Driven(waits_forever, "other")  # keeps the loop open: the close must not depend on it
    waiting = Driven(waits_forever, "waiting")
    assert other.send() is not None and waiting.send() is not None
    loop = cast(AgentLoop, tasks[0]().get_loop())  # type: ignore[union-attr]  # alive: it waits

    waiting.close()  # GeneratorExit, as when the worker lets the run go or the run ends
    assert cleaned == ["finally ran"]  # the task ran its cleanup before close returned
    gc.collect()
    assert tasks[1]() is None  # and nothing holds it any more
    assert {task.get_name() for task in asyncio.all_tasks(loop)} == {tasks[0]().get_name()}  # type: ignore[union-attr]
    assert not loop.is_closed() and loop.runs == 1

    other.close()
    assert cleaned == ["finally ran", "finally ran"] and loop.is_closed()


def test_anyio_task_groups_cancel_scopes_and_sniffio_work_on_the_agent_loop() -> None:
    seen: dict[str, Any] = {}

    async def agent() -> list[Any]:
        run = current_run()
        assert run is not None
        seen["library"] = sniffio.current_async_library()
        seen["task"] = asyncio.current_task() is not None
        answers: list[Any] = []

        async def ask(position: int) -> None:
            answers.append(await run.wait_for(DurableFuture(position)))

        async with anyio.create_task_group() as group:  # parallel calls: one batch
            group.start_soon(ask, 0)
            group.start_soon(ask, 1)
        with anyio.move_on_after(30) as scope:  # a deadline timer that never fires
            answers.append(await run.wait_for(DurableFuture(2)))
        seen["cancelled"] = scope.cancelled_caught
        return answers

    driven = Driven(agent, "anyio")
    first = driven.send()
    assert first is not None and first.position == 0
    first.set_result("x")
    second = driven.send()  # the batch's second call, issued in the same turn
    assert second is not None and second.position == 1
    second.set_result("y")
    third = driven.send()
    assert third is not None and third.position == 2
    third.set_result("z")
    assert driven.send() is None
    assert sorted(driven.result[:2]) == ["x", "y"] and driven.result[2] == "z"
    assert seen == {"library": "asyncio", "task": True, "cancelled": False}


def test_an_agent_run_driven_from_a_uvloop_task_restores_the_workers_loop() -> None:
    async def agent() -> str:
        run = current_run()
        assert run is not None
        assert isinstance(asyncio.get_running_loop(), AgentLoop)
        return str(await run.wait_for(DurableFuture(0)))

    async def worker() -> str:
        mine = asyncio.get_running_loop()
        marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")
        marker.set("worker")
        driven = Driven(agent, "uv")
        future = driven.send()
        assert asyncio.get_running_loop() is mine and asyncio.current_task() is not None
        assert future is not None
        future.set_result("answered")
        await asyncio.sleep(0)  # the worker's own loop goes on between the agent's turns
        assert driven.send() is None and asyncio.get_running_loop() is mine
        assert marker.get() == "worker"
        return str(driven.result)

    assert uvloop.run(worker()) == "answered"
    assert threading.current_thread() is threading.main_thread()
