"""The private asyncio loop that framework agent runs share, driven inline by the thread that
steps their workflows (runtime.integrations.bridge).

One loop per thread that drives runs (a worker has one), created when its first agent run
starts and closed when its last one ends. It never runs on its own: the workflow side *enters*
it -- makes it the thread's running loop (and its async generators' hooks the thread's) for the
moment, restoring the worker's loop after -- and runs its ready callbacks until the agent run it
activates hands over its calls or ends. A waiting agent run is a suspended task on it: no thread,
no descriptor. The loop's own descriptors (its selector and self-pipe) are three per driving
thread, whatever the number of runs.

The loop is a plain asyncio ``SelectorEventLoop`` whatever the worker's policy (uvloop): the
bridge reads its run queue (``_ready``) to know it is idle and steps it with ``_run_once`` --
``BaseEventLoop`` internals, the only way to ask a loop whether it has anything to do or to run
it one round without ``run_forever`` (which refuses to start inside the worker's running loop).
Nothing but its tasks' own callbacks, its timers and the executor jobs it started (counted here)
can wake it: when none of these is pending, an agent that has not handed over is stuck.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from asyncio import events
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_per_thread = threading.local()


def _noop() -> None:
    pass


class AgentLoop(asyncio.SelectorEventLoop):
    """The agent runs' loop of one thread (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.owner = threading.get_ident()
        self.runs = 0  # agent runs living on it: it closes when the last one ends
        self.jobs = 0  # executor jobs under way: their ends may wake it from another thread
        self.driving = False

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.jobs += 1
        future.add_done_callback(self._job_done)
        return future

    def _job_done(self, _future: asyncio.Future[Any]) -> None:
        self.jobs -= 1

    @contextmanager
    def entered(self) -> Iterator[None]:
        """This loop as the thread's running loop while the block runs; the worker's loop after."""
        if self.driving:
            raise RuntimeError("an agent run was driven from inside an agent loop")
        outer = events._get_running_loop()
        hooks = sys.get_asyncgen_hooks()
        events._set_running_loop(self)
        # An async generator started by an agent is finalized on this loop, not the worker's.
        sys.set_asyncgen_hooks(
            firstiter=self._asyncgen_firstiter_hook,  # type: ignore[attr-defined]  # BaseEventLoop's
            finalizer=self._asyncgen_finalizer_hook,  # type: ignore[attr-defined]  # BaseEventLoop's
        )
        self._thread_id = threading.get_ident()  # is_running() is True, as under run_forever
        self.driving = True
        try:
            yield
        finally:
            self.driving = False
            self._thread_id = None  # type: ignore[assignment]  # BaseEventLoop's: None when not running
            sys.set_asyncgen_hooks(*hooks)
            events._set_running_loop(outer)

    def run_ready(self) -> None:
        """Run callbacks (and the timers that fall due) until nothing is ready."""
        ready = self._ready  # type: ignore[attr-defined]  # BaseEventLoop's run queue
        while ready:
            if self._scheduled:  # type: ignore[attr-defined]  # timers: a round moves the due ones
                self._run_once()  # type: ignore[attr-defined]
                continue
            # No timers: run the callback itself, without the round's selector poll (a system call
            # per callback; only executor jobs write to the self-pipe, and their callbacks are queued).
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    def can_wake_before(self, deadline: float) -> bool:
        """Whether anything may make a callback ready before ``deadline`` (loop time): an executor
        job under way or a timer due by then."""
        if self.time() >= deadline:
            return False
        if self.jobs:
            return True
        scheduled = self._scheduled  # type: ignore[attr-defined]  # BaseEventLoop's timer heap
        return any(not timer.cancelled() and timer.when() <= deadline for timer in scheduled)

    def wait_until_woken(self, deadline: float) -> None:
        """Nothing is ready: block on the selector until something is (a timer, an executor job's
        end written to the self-pipe) or ``deadline``, then run what became ready."""
        sentinel = self.call_at(deadline, _noop)
        try:
            self._run_once()  # type: ignore[attr-defined]  # waits at most until the sentinel
        finally:
            sentinel.cancel()


def acquire() -> AgentLoop:
    """The calling thread's agent loop, with one more run living on it."""
    loop: AgentLoop | None = getattr(_per_thread, "loop", None)
    if loop is None or loop.is_closed():
        loop = AgentLoop()
        _per_thread.loop = loop
    loop.runs += 1
    return loop


def release(loop: AgentLoop) -> None:
    """One run fewer on ``loop``; the last one out closes it (on its own thread, between drives;
    otherwise the loop stays for the thread's next agent run)."""
    loop.runs -= 1
    if loop.runs > 0 or loop.driving or loop.owner != threading.get_ident() or loop.is_closed():
        return
    with loop.entered():
        # Close the async generators the agents left open, on this loop, as asyncio.run does.
        closing = loop.create_task(loop.shutdown_asyncgens())
        loop.run_ready()
        if not closing.done():  # an async generator's cleanup waits for something: leave it
            closing.cancel()
            loop.run_ready()
    loop.close()
    if getattr(_per_thread, "loop", None) is loop:
        del _per_thread.loop
