"""Running a framework's asyncio agent loop inside an agentlog workflow.

A workflow coroutine is driven by hand (``runtime.workflow.futures``): it may await only agentlog's
durable futures. A framework's agent loop (PydanticAI's graph, the Agents SDK's runner) is ordinary
asyncio code: anyio cancel scopes, locks and events that need a real task on a real loop. So the
loop runs on a private event loop in a thread of its own (one per agent run), and the workflow
drives it in lock step:

1. the workflow hands control to the agent thread and blocks until the thread comes back;
2. the agent thread runs until it needs the world: it issues the agentlog command itself
   (``ctx.model`` / ``ctx.tool`` / ``ctx.sleep`` / ``ctx.wait_signal``, synchronous calls that only
   record an intent -- safe, since the workflow side is blocked meanwhile) and hands the durable
   future back;
3. the workflow awaits that future (live: the worker carries out the call; replay: history serves
   it), then gives its outcome to the agent thread, and so on until the agent's coroutine ends.

Only one command is outstanding at a time, so the order of commands is the agent's program order:
the same on every replay. Frameworks that would run tool calls concurrently are switched to
sequential execution by their integration. The agent thread runs only while the workflow side
waits for it; the bodies of calls (the model request, the tool) run where the worker carries out
calls, never on the agent thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from runtime.errors import AgentlogError
from runtime.workflow.context import Context
from runtime.workflow.futures import DurableFuture

T = TypeVar("T")

# How long the workflow side waits for the agent thread to reach its next command or its end.
# Between two commands an agent only computes (its I/O is in the calls); a thread silent this long
# is stuck on something that is not an agentlog call.
STEP_TIMEOUT_S = 60.0


class AgentBridgeError(AgentlogError):
    """The agent loop did something a durable run cannot record (awaited I/O outside a call, issued
    two commands at once, went silent)."""


@dataclass(frozen=True)
class _Await:
    future: DurableFuture


@dataclass(frozen=True)
class _Done:
    value: Any = None
    error: BaseException | None = None


_current: contextvars.ContextVar[AgentRun[Any] | None] = contextvars.ContextVar(
    "agentlog_agent_run", default=None
)


def current_run() -> AgentRun[Any] | None:
    """The agent run this code is part of, on its agent thread; None elsewhere (and inside a call)."""
    return _current.get()


class AgentRun(Generic[T]):
    """One framework agent run inside one workflow run, on its own thread and event loop."""

    def __init__(self, ctx: Context, start: Callable[[], Coroutine[Any, Any, T]], name: str) -> None:
        self.ctx = ctx
        self.name = name
        self._start = start
        self._to_workflow: queue.SimpleQueue[_Await | _Done] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: asyncio.Future[Any] | None = None
        self._main: asyncio.Task[T] | None = None
        self._thread: threading.Thread | None = None
        self._counters: dict[str, int] = {}

    def next_count(self, what: str) -> int:
        """0, 1, 2 ... per ``what`` within this agent run: stable names for repeated things."""
        n = self._counters.get(what, 0)
        self._counters[what] = n + 1
        return n

    # ------------------------------------------------------------------ agent-thread side
    async def wait_for(self, future: DurableFuture) -> Any:
        """On the agent thread: hand ``future`` to the workflow and wait for its outcome."""
        if self._loop is None or asyncio.get_running_loop() is not self._loop:
            raise AgentBridgeError(f"agent run {self.name!r}: a durable call was awaited off its agent loop")
        if self._waiting is not None:
            raise AgentBridgeError(
                f"agent run {self.name!r} issued a second call (position {future.position}) while one "
                "is outstanding; durable agent runs call tools one at a time"
            )
        self._waiting = self._loop.create_future()
        self._to_workflow.put(_Await(future))
        try:
            return await self._waiting
        finally:
            self._waiting = None

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def main() -> T:
            _current.set(self)
            return await self._start()

        self._main = loop.create_task(main())
        self._main.add_done_callback(self._report)
        ready.set()
        try:
            loop.run_until_complete(asyncio.wait([self._main]))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _report(self, task: asyncio.Task[T]) -> None:
        if task.cancelled():
            self._to_workflow.put(_Done(error=AgentBridgeError(f"agent run {self.name!r} was cancelled")))
        elif task.exception() is not None:
            self._to_workflow.put(_Done(error=task.exception()))
        else:
            self._to_workflow.put(_Done(value=task.result()))

    def _resume(self, value: Any = None, error: BaseException | None = None) -> None:
        def deliver() -> None:
            waiting = self._waiting
            assert waiting is not None, "resumed with no call outstanding"
            if error is not None:
                waiting.set_exception(error)
            else:
                waiting.set_result(value)

        assert self._loop is not None
        self._loop.call_soon_threadsafe(deliver)

    def _stop(self) -> None:
        """Cancel the agent's coroutine (the run ended without it: cancelled, parked, closed)."""
        if self._loop is not None and self._main is not None and not self._main.done():
            self._loop.call_soon_threadsafe(self._main.cancel)
        if self._thread is not None:
            self._thread.join(timeout=STEP_TIMEOUT_S)

    # ------------------------------------------------------------------ workflow side
    def _next(self) -> _Await | _Done:
        try:
            return self._to_workflow.get(timeout=STEP_TIMEOUT_S)
        except queue.Empty:
            self._stop()
            raise AgentBridgeError(
                f"agent run {self.name!r} neither issued a call nor ended within {STEP_TIMEOUT_S} s: it "
                "awaits something that is not an agentlog call (I/O outside a model or tool call?)"
            ) from None

    def __await__(self) -> Generator[Any, None, T]:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name=f"agent-{self.name}", daemon=True
        )
        self._thread.start()
        ready.wait()
        try:
            while True:
                message = self._next()
                if isinstance(message, _Done):
                    self._thread.join(timeout=STEP_TIMEOUT_S)
                    if message.error is not None:
                        raise message.error
                    return message.value  # type: ignore[no-any-return]  # the agent coroutine's T
                try:
                    outcome = yield from message.future.__await__()
                except Exception as error:  # a failed call (CallFailed, TimeoutError): the agent decides
                    self._resume(error=error)
                else:
                    self._resume(value=outcome)
        except GeneratorExit:
            self._stop()
            raise
