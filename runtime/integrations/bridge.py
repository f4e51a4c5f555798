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

Commands are handed over when the agent loop has nothing left to run (every task of it waits for a
call): those issued concurrently (parallel tool calls) go as one batch, in the order the agent's
tasks issued them, which is the program's own order -- between calls the loop only computes, on a
loop of its own with no I/O, so the same code issues them in the same order on every replay (and
a replay that met another order would stop at the first differing command, not carry on). The
batch's calls run side by side in the worker; their outcomes go back together, in issue order.
The agent thread runs only while the workflow side waits for it; the bodies of calls (the model
request, the tool) run where the worker carries out calls, never on the agent thread.
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
    futures: list[DurableFuture]


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

    def __init__(
        self,
        ctx: Context,
        start: Callable[[], Coroutine[Any, Any, T]],
        name: str,
        *,
        step_timeout_s: float = STEP_TIMEOUT_S,
    ) -> None:
        self.ctx = ctx
        self.name = name
        self.step_timeout_s = step_timeout_s
        self._start = start
        self._to_workflow: queue.SimpleQueue[_Await | _Done] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Calls issued since the last hand-over: (durable future, what its caller awaits).
        self._pending: list[tuple[DurableFuture, asyncio.Future[Any]]] = []
        self._idle_check_scheduled = False
        self._in_flight: list[asyncio.Future[Any]] = []
        # True while the workflow side waits for the agent thread (it may issue calls then); False
        # from a hand-over until the outcomes are delivered.
        self._has_control = True
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
        loop = self._loop
        if loop is None or asyncio.get_running_loop() is not loop:
            raise AgentBridgeError(f"agent run {self.name!r}: a durable call was awaited off its agent loop")
        if not self._has_control:
            raise AgentBridgeError(
                f"agent run {self.name!r} issued a call (position {future.position}) while its earlier calls "
                "were outstanding: something outside agentlog (a timer, I/O) woke the agent loop; route waits "
                "through the run (durable sleeps) and leave the framework's own retries off"
            )
        waiting: asyncio.Future[Any] = loop.create_future()
        self._pending.append((future, waiting))
        if not self._idle_check_scheduled:
            self._idle_check_scheduled = True
            loop.call_soon(self._hand_over_when_idle)
        return await waiting

    def _hand_over_when_idle(self) -> None:
        """Hand the pending calls over once nothing else of the agent can run: the callbacks
        queued behind this one are the agent's tasks still making progress (they may issue more
        calls of the same batch). ``_ready`` is asyncio's run queue (BaseEventLoop; the loop is
        made a SelectorEventLoop for it) -- the only way to ask a loop whether it is idle."""
        loop = self._loop
        assert loop is not None
        if loop._ready:  # type: ignore[attr-defined]  # BaseEventLoop's run queue
            loop.call_soon(self._hand_over_when_idle)
            return
        self._idle_check_scheduled = False
        self._has_control = False
        batch, self._pending = self._pending, []
        self._in_flight = [waiting for _, waiting in batch]
        self._to_workflow.put(_Await([future for future, _ in batch]))

    def _serve(self, ready: threading.Event) -> None:
        # A plain asyncio loop whatever the worker's policy (uvloop): _hand_over_when_idle reads its queue.
        loop = asyncio.SelectorEventLoop()
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

    def _resume(self, outcomes: list[tuple[Any, BaseException | None]]) -> None:
        """Give the batch's outcomes (value, error) to the agent tasks awaiting them, in issue order."""
        waiting, self._in_flight = self._in_flight, []

        def deliver() -> None:
            self._has_control = True
            for future, (value, error) in zip(waiting, outcomes, strict=True):
                if future.cancelled():
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(value)

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
            return self._to_workflow.get(timeout=self.step_timeout_s)
        except queue.Empty:
            self._stop()
            raise AgentBridgeError(
                f"agent run {self.name!r} neither issued a call nor ended within {self.step_timeout_s} s: it "
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
                outcomes: list[tuple[Any, BaseException | None]] = []
                for future in message.futures:  # they run side by side; collected in issue order
                    try:
                        outcomes.append(((yield from future.__await__()), None))
                    except Exception as error:  # a failed call (CallFailed, TimeoutError): the agent decides
                        outcomes.append((None, error))
                self._resume(outcomes)
        except GeneratorExit:
            self._stop()
            raise
