"""Running a framework's asyncio agent loop inside an agentlog workflow.

A workflow coroutine is driven by hand (``runtime.workflow.futures``): it may await only agentlog's
durable futures. A framework's agent loop (PydanticAI's graph, the Agents SDK's runner) is ordinary
asyncio code: anyio cancel scopes, task groups, locks and events that need a real task on a real
loop. So each agent run is a task on a private asyncio loop that all agent runs of the thread share
(``runtime.integrations.agent_loop``), and the workflow drives that loop inline, on its own thread,
in lock step:

1. the workflow side enters the agent loop (makes it the thread's running loop for the moment) and
   runs its ready callbacks -- the agent computing -- until the agent needs the world: it issues the
   agentlog command itself (``ctx.model`` / ``ctx.tool`` / ``ctx.sleep`` / ``ctx.wait_signal``,
   synchronous calls that only record an intent) and awaits ``wait_for``, which parks its task;
2. once nothing of the loop is ready, the calls issued are handed over as one batch, the worker's
   loop is restored, and the workflow yields their durable futures (live: the worker carries the
   calls out; replay: history serves them);
3. when they are done, the workflow enters the loop again, gives the outcomes to the agent tasks
   awaiting them (in issue order) and runs it again, and so on until the agent's coroutine ends.

Only the run being driven has ready callbacks: every other agent run on the loop is a task
suspended on an outcome not yet given, so "nothing ready" means "this agent waits for its calls".
Calls issued concurrently (parallel tool calls) go as one batch, in the order the agent's tasks
issued them, which is the program's own order -- between calls the loop only computes, with no
I/O, so the same code issues them in the same order on every replay (and a replay that met another
order would stop at the first differing command, not carry on). The batch's calls run side by side
in the worker; their outcomes go back together, in issue order. The bodies of calls (the model
request, the tool) run where the worker carries out calls, never on the agent loop.

A waiting agent run holds no thread and no descriptor, only its task's memory. It never hangs the
worker: if nothing is ready and the agent has neither handed over nor ended, it waits for something
that is not an agentlog call. An executor job the loop started (``run_in_executor``,
``asyncio.to_thread``) or a timer due within ``step_timeout_s`` is waited for, that long at most;
anything else (an ``asyncio.Event``, a future, a socket) fails the run at once with an
``AgentBridgeError`` naming it. Closing the workflow (its end, a cancel, a park, the worker letting
the run go) cancels the agent's task and runs the loop until the task has finished, before the
close returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from runtime.errors import AgentlogError, RunCannotGoOn
from runtime.integrations.agent_loop import AgentLoop, acquire, release
from runtime.workflow.context import Context
from runtime.workflow.futures import DurableFuture

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long the workflow side waits for an agent that awaits an executor job or a timer to reach its
# next command or its end. Between two commands an agent only computes (its I/O is in the calls).
STEP_TIMEOUT_S = 60.0


class AgentBridgeError(AgentlogError):
    """The agent loop did something a durable run cannot record (awaited something that is not an
    agentlog call, issued a call while its earlier ones were outstanding, went silent)."""


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
    """The agent run this code is part of, on its agent loop; None elsewhere (and inside a call)."""
    return _current.get()


class AgentRun(Generic[T]):
    """One framework agent run inside one workflow run: a task on the thread's agent loop."""

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
        self._loop: AgentLoop | None = None
        # Calls issued since the last hand-over: (durable future, what its caller awaits).
        self._pending: list[tuple[DurableFuture, asyncio.Future[Any]]] = []
        self._in_flight: list[asyncio.Future[Any]] = []
        # True while the workflow side drives this run (it may issue calls then); False from a
        # hand-over until the outcomes are given back.
        self._has_control = True
        self._closing = False
        self._main: asyncio.Task[T] | None = None
        self._counters: dict[str, int] = {}

    def next_count(self, what: str) -> int:
        """0, 1, 2 ... per ``what`` within this agent run: stable names for repeated things."""
        n = self._counters.get(what, 0)
        self._counters[what] = n + 1
        return n

    # ------------------------------------------------------------------ agent side
    async def wait_for(self, future: DurableFuture) -> Any:
        """On the agent loop: hand ``future`` to the workflow and wait for its outcome."""
        loop = self._loop
        if loop is None or asyncio.get_running_loop() is not loop:
            raise AgentBridgeError(f"agent run {self.name!r}: a durable call was awaited off its agent loop")
        if self._closing:
            raise asyncio.CancelledError(f"agent run {self.name!r} is closing: no more calls")
        if not self._has_control:
            raise AgentBridgeError(
                f"agent run {self.name!r} issued a call (position {future.position}) while its earlier calls "
                "were outstanding: something outside agentlog (a timer, I/O) woke the agent loop; route waits "
                "through the run (durable sleeps) and leave the framework's own retries off"
            )
        waiting: asyncio.Future[Any] = loop.create_future()
        self._pending.append((future, waiting))
        return await waiting

    async def _main_coro(self) -> T:
        _current.set(self)
        return await self._start()

    # ------------------------------------------------------------------ workflow side
    def _advance(self) -> _Await | _Done:
        """Run the agent loop until this agent hands over its calls or ends (inside ``entered``)."""
        loop, main = self._loop, self._main
        assert loop is not None and main is not None
        deadline = loop.time() + self.step_timeout_s
        while True:
            loop.run_ready()
            if main.done():
                return self._ended(main)
            if self._pending:
                self._has_control = False
                batch, self._pending = self._pending, []
                self._in_flight = [waiting for _, waiting in batch]
                return _Await([future for future, _ in batch])
            if not loop.can_wake_before(deadline):
                raise self._stuck(loop.time() >= deadline)
            loop.wait_until_woken(deadline)

    def _stuck(self, timed_out: bool) -> AgentBridgeError:
        if timed_out:
            return AgentBridgeError(
                f"agent run {self.name!r} neither issued a call nor ended within {self.step_timeout_s} s: it "
                "awaits something that is not an agentlog call (I/O outside a model or tool call?)"
            )
        return AgentBridgeError(
            f"agent run {self.name!r} neither issued a call nor ended, and nothing can wake it within "
            f"{self.step_timeout_s} s: it awaits "
            "something that is not an agentlog call (an asyncio event or future, I/O, a thread outside the "
            "loop's executor); every wait of an agent must be a call of the run (a model or tool call, "
            "a durable sleep or signal wait)"
        )

    def _ended(self, main: asyncio.Task[T]) -> _Done:
        if main.cancelled():
            return _Done(error=AgentBridgeError(f"agent run {self.name!r} was cancelled"))
        error = main.exception()
        return _Done(error=error) if error is not None else _Done(value=main.result())

    def _give_back(self, outcomes: list[tuple[Any, BaseException | None]]) -> None:
        """Give the batch's outcomes (value, error) to the agent tasks awaiting them, in issue order."""
        waiting, self._in_flight = self._in_flight, []
        self._has_control = True
        for future, (value, error) in zip(waiting, outcomes, strict=True):
            if future.cancelled():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

    def _close(self) -> None:
        """Cancel the agent's task if it still runs (the run ended without it: cancelled, parked,
        let go) and run the loop until the task has finished."""
        loop, main = self._loop, self._main
        if loop is None or main is None or main.done():
            return
        self._closing = True
        self._pending = []
        if loop.owner != threading.get_ident():  # closed by the garbage collector of another thread
            loop.call_soon_threadsafe(main.cancel)
            return
        main.cancel()
        if loop.driving:  # closed while the loop runs (a collected workflow): the drive finishes it
            return
        with loop.entered():
            deadline = loop.time() + self.step_timeout_s
            loop.run_ready()
            while not main.done() and loop.can_wake_before(deadline):
                loop.wait_until_woken(deadline)
                loop.run_ready()
        if not main.done():
            log.warning("agent run %r did not end when cancelled: its task is left behind", self.name)

    def __await__(self) -> Generator[Any, None, T]:
        try:
            loop = self._loop = acquire()
        except OSError as error:  # out of descriptors (EMFILE) for the thread's first agent loop
            raise RunCannotGoOn(
                f"agent run {self.name!r} cannot start: the worker could not open its agent loop ({error})"
            ) from error
        try:
            with loop.entered():
                # A context of its own, as the agent's thread had: nothing of the worker's leaks in.
                self._main = loop.create_task(self._main_coro(), context=contextvars.Context())
                # A workflow dropped unclosed takes its waiting task with it: no leak to warn about.
                self._main._log_destroy_pending = False  # type: ignore[attr-defined]  # asyncio.Task's
                message = self._advance()
            while isinstance(message, _Await):
                outcomes: list[tuple[Any, BaseException | None]] = []
                for future in message.futures:  # they run side by side; collected in issue order
                    try:
                        outcomes.append(((yield from future.__await__()), None))
                    except Exception as error:  # a failed call (CallFailed, TimeoutError): the agent decides
                        outcomes.append((None, error))
                with loop.entered():
                    self._give_back(outcomes)
                    message = self._advance()
            if message.error is not None:
                raise message.error
            return message.value  # type: ignore[no-any-return]  # the agent coroutine's T
        finally:  # its end, an error, or GeneratorExit (the workflow closed): the task goes too
            self._close()
            self._main, self._in_flight = None, []  # a run kept by its caller keeps no task
            release(loop)
