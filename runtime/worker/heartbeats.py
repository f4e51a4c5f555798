"""Heartbeats: a long tool call reports its progress, and a silent one is failed early.

Inside a tool (sync or async), ``heartbeat(details)`` records progress (JSON-able details) and
``last_heartbeat()`` returns the last details reported for this call -- by this attempt, or else by
an earlier one, on this worker or on the one that died with the call in flight -- or None. A tool
resumes from them on its retry instead of starting over.

Durable: the details go into the run's history as ``ToolCallHeartbeat`` records (the log stays
the only truth), delivered to the run like any record of a call in flight, so a replay feeds them to
the call's next attempt (``Intent.heartbeat``). A tool that heart-beats in a tight loop writes at
most one record per ``RECORD_INTERVAL_S``: the first details at once, then the latest of those
reported since, once the interval has passed (:class:`Throttle`); the last pending ones are written
when the attempt ends, before its outcome.

``heartbeat_timeout`` (``app.tool(..., heartbeat_timeout=...)``): an attempt that goes that long
without a heartbeat -- counted from its start -- fails with :class:`HeartbeatTimeout` (a
``TimeoutError``, retried by the tool's retry policy with the same idempotency key), without
waiting for the policy's whole ``timeout``. The watch is the worker's own clock: a worker that dies
takes its calls with it, and its successor runs them again in doubt anyway.

The worker's hook is one object per tool attempt (:class:`CallBeats`, made by the executor):
``bound`` sets the context variable the two functions read around the tool's own code (in the pool's
thread for a sync tool), ``watched`` awaits the call under the heartbeat timeout, ``close`` writes
what is pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson

from runtime.errors import AgentlogError, RetryableError
from runtime.log.records.events import ToolCallHeartbeat
from runtime.workflow.canonical import canonical_json

T = TypeVar("T")

# At most one ToolCallHeartbeat record per call this often: a tool beating every millisecond
# costs the log one record a second, and a crash loses at most a second of reported progress.
RECORD_INTERVAL_S = 1.0
# Details are recorded inline, again at every interval: progress (a cursor, a count), not data.
MAX_DETAILS_BYTES = 16 * 1024

_current: contextvars.ContextVar[CallBeats | None] = contextvars.ContextVar(
    "agentlog_heartbeat", default=None
)


class HeartbeatTimeout(RetryableError, TimeoutError):
    """A tool call went longer than its ``heartbeat_timeout`` without a heartbeat: the attempt
    failed, and the call is retried by its retry policy (with the same idempotency key)."""


def heartbeat(details: Any = None) -> None:
    """Report the progress of the tool call this runs in: ``details`` (JSON-able) are recorded in
    the run's history (at most once a second, the latest kept) and read back by the call's next
    attempt with ``last_heartbeat()``. Also keeps a call with a ``heartbeat_timeout`` alive.
    Raises AgentlogError outside a tool call, TypeError for details that are not JSON, ValueError
    for details over 16 KiB."""
    _beats("heartbeat").beat(details)


def last_heartbeat() -> Any:
    """The last details reported by this tool call -- this attempt's latest ``heartbeat(details)``,
    or else an earlier attempt's, also one that a killed worker had in flight -- or None when none
    was. Raises AgentlogError outside a tool call."""
    return _beats("last_heartbeat").last()


def _beats(fn: str) -> CallBeats:
    beats = _current.get()
    if beats is None:
        raise AgentlogError(
            f"{fn}() is called outside a tool call: only a tool registered with app.tool and run by "
            "a worker (or run_local) has a call to report progress of"
        )
    return beats


class Throttle:
    """When the next record may be written: at once after ``interval`` seconds without one, else
    once the interval since the last has passed (times are ``time.monotonic()`` seconds)."""

    __slots__ = ("_written_at", "interval")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._written_at: float | None = None

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until a record may be written (0: now)."""
        if self._written_at is None:
            return 0.0
        return max(0.0, self._written_at + self.interval - now)

    def wrote(self, now: float) -> None:
        self._written_at = now


class CallBeats:
    """The heartbeats of one attempt of one tool call: what it reported, what was recorded, and its
    silence watched. ``beat`` may come from any thread; everything else runs on the worker's loop.
    ``deliver`` hands a record to the run (appended like the call's other records). Made for every
    tool attempt, so it costs a few attributes until the tool beats."""

    __slots__ = (
        "_armed",
        "_beat_at",
        "_clock",
        "_closed",
        "_deliver",
        "_last_beat",
        "_latest",
        "_lock",
        "_loop",
        "_pending",
        "_silent",
        "_throttle",
        "_watch",
        "_write_timer",
        "attempt",
        "position",
        "timeout",
        "tool",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        tool: str,
        position: int,
        attempt: int,
        prior: str | None,
        deliver: Callable[[ToolCallHeartbeat], None],
        clock: Callable[[], int],
        timeout: float | None = None,
        interval: float = RECORD_INTERVAL_S,
    ) -> None:
        self._loop = loop
        self.tool = tool
        self.position = position
        self.attempt = attempt
        self.timeout = timeout
        self._deliver = deliver
        self._clock = clock  # wall-clock ms, the writer's
        self._throttle = Throttle(interval)
        self._lock = threading.Lock()  # latest/pending/closed: the tool's thread and the loop
        self._latest = prior  # canonical JSON of the last details known for the call
        self._beat_at = 0  # wall-clock ms of this attempt's latest beat; 0 before any
        self._pending = False  # a beat not recorded yet
        self._armed = False  # a write is scheduled on the loop
        self._closed = False
        self._last_beat = time.monotonic()  # the silence is counted from the attempt's start
        self._silent = False
        self._watch: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the tool's side
    def beat(self, details: Any) -> None:
        try:
            text = canonical_json(details)
        except TypeError as error:
            raise TypeError(f"heartbeat details of tool {self.tool!r} must be JSON: {error}") from None
        if len(text) > MAX_DETAILS_BYTES and len(text.encode()) > MAX_DETAILS_BYTES:
            raise ValueError(
                f"heartbeat details of tool {self.tool!r} are {len(text.encode())} bytes, over "
                f"{MAX_DETAILS_BYTES}: report progress (a cursor, a count), not data"
            )
        self._last_beat = time.monotonic()
        with self._lock:
            if self._closed:  # an attempt already given up (timed out): its thread beats on
                return
            self._latest, self._beat_at, self._pending = text, self._clock(), True
            if self._armed:
                return
            self._armed = True
        if _on_loop(self._loop):
            self._arm()
            return
        # RuntimeError: the loop is closed, the worker is shutting down; nothing more is recorded.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._arm)

    def last(self) -> Any:
        latest = self._latest
        return None if latest is None else orjson.loads(latest)

    # ------------------------------------------------------------------ the loop's side
    def _arm(self) -> None:
        delay = self._throttle.delay(time.monotonic())
        if delay <= 0:
            self._write()
        else:
            self._write_timer = self._loop.call_later(delay, self._write)

    def _write(self) -> None:
        with self._lock:
            self._armed = False
            if self._closed or not self._pending:
                return
            text, beat_at, self._pending = self._latest, self._beat_at, False
        self._throttle.wrote(time.monotonic())
        self._record(text, beat_at)

    def _record(self, text: str | None, beat_at: int) -> None:
        self._deliver(
            ToolCallHeartbeat(
                run_id="",
                position=self.position,
                attempt=self.attempt,
                details="null" if text is None else text,
                beat_at=beat_at,
            )
        )

    def bound(self, fn: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
        """``fn`` run with this attempt as the one ``heartbeat()`` reports on (a sync tool runs in a
        pool thread: the variable is set there, around the call only)."""
        if is_async:

            async def run_async(*args: Any, **kwargs: Any) -> Any:
                token = _current.set(self)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _current.reset(token)

            return run_async

        def run_sync(*args: Any, **kwargs: Any) -> Any:
            token = _current.set(self)
            try:
                return fn(*args, **kwargs)
            finally:
                _current.reset(token)

        return run_sync

    async def watched(self, call: Awaitable[T]) -> T:
        """Await the call; with a heartbeat timeout, fail it with HeartbeatTimeout once it has been
        silent that long (its task cancelled, as the retry policy's timeout does). The pending
        details are recorded when it ends, however it ends (before its outcome is)."""
        try:
            if self.timeout is None:
                return await call
            task = asyncio.current_task()
            assert task is not None
            self._watch = self._loop.call_later(self.timeout, self._check, task)
            try:
                return await call
            except asyncio.CancelledError:
                if self._silent and task.uncancel() == 0:
                    raise HeartbeatTimeout(
                        f"tool {self.tool!r} sent no heartbeat for {self.timeout:g} s (its heartbeat_timeout)"
                    ) from None
                raise
        finally:
            self.close()

    def _check(self, task: asyncio.Task[Any]) -> None:
        assert self.timeout is not None
        silent_for = time.monotonic() - self._last_beat
        if silent_for >= self.timeout:
            self._silent = True
            task.cancel()
        else:
            self._watch = self._loop.call_later(self.timeout - silent_for, self._check, task)

    def close(self) -> None:
        """The attempt ended: stop watching, and record its latest details if not yet recorded."""
        if self._watch is not None:
            self._watch.cancel()
        if self._write_timer is not None:
            self._write_timer.cancel()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, text, beat_at = self._pending, self._latest, self._beat_at
            self._pending = False
        if pending:
            self._record(text, beat_at)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
