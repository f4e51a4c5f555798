"""Threads for sync model and tool calls, answering straight into the event loop.

``asyncio.to_thread`` costs a concurrent Future, a context copy and a chained asyncio Future per
call, twice per agent step. This pool hands each call to a thread over a
queue and sets the loop's own future from the thread with one ``call_soon_threadsafe``.

How many threads: sync calls come in two kinds, and one pool size cannot serve both.
- Short calls that work (a commit to a local store, a parse): each thread more competes for the
  GIL with the event loop, which carries every run, and for the store's lock -- more threads
  make the worker slower. The pool starts with asyncio's own default executor's size,
  ``min(32, cpus + 4)`` (what ``asyncio.to_thread`` and an SDK's executor give).
- Calls that wait (a sync SDK's HTTP request to a model, seconds long): each holds its thread
  doing nothing, and runs beyond the pool's size queue behind it. So when calls are queued and
  every thread's call has run for ``STALLED_S`` or more, the threads are held by calls that wait:
  the pool starts a thread for each queued call, up to ``max_threads``. A thread started so
  leaves once it has had nothing to do for ``IDLE_EXIT_S``.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.worker.cancellation import set_awaited

_Job = tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None

# Every thread's call has run this long while calls are queued: the threads wait on their calls.
STALLED_S = 0.05
IDLE_EXIT_S = 30.0  # a thread beyond the core size leaves after this long without a call
MAX_THREADS = 256


def core_threads() -> int:
    """asyncio's default executor's size (concurrent.futures.ThreadPoolExecutor's default)."""
    return min(32, (os.cpu_count() or 1) + 4)


class CallPool:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threads: int | None = None,
        max_threads: int = MAX_THREADS,
        on_exhausted: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        """``on_exhausted(where, error)``: a thread the queued calls need could not be started (the
        worker stops on it: its threads may all wait on calls that never return)."""
        self._loop = loop
        self._on_exhausted = on_exhausted
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.core = threads if threads is not None else core_threads()
        self.max_threads = max(max_threads, self.core)
        self._lock = threading.Lock()  # the threads: started by the loop, leaving on their own
        # Thread number -> when its current call started (time.monotonic()), 0.0 while it waits
        # for one. Each thread writes its own entry only; the loop reads them (``_check``).
        self._started: dict[int, float] = {}
        self._numbers = 0
        self._check_armed = False
        self._closed = False
        for _ in range(self.core):
            self._start_thread(extra=False)

    @property
    def threads(self) -> int:
        return len(self._started)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        self._jobs.put((future, fn, args, kwargs))
        if not self._check_armed and len(self._started) < self.max_threads:
            self._check_armed = True
            self._loop.call_later(STALLED_S, self._check)
        return future

    def _check(self) -> None:
        """While calls are queued: if every thread's call has run for ``STALLED_S`` or more, the
        threads wait on their calls (a working thread would have taken a new one since): start a
        thread per queued call, up to ``max_threads``. Looked at from the threads' own clocks, so
        an event loop busy for a while (a takeover's replay) does not read as stalled threads."""
        self._check_armed = False
        queued = self._jobs.qsize()
        if self._closed or queued == 0:
            return
        started = list(self._started.values())
        stalled_since = time.monotonic() - STALLED_S
        if all(0.0 < at <= stalled_since for at in started):
            try:
                for _ in range(min(queued, self.max_threads - len(started))):
                    self._start_thread(extra=True)
            except RuntimeError as error:  # "can't start new thread"
                if self._on_exhausted is None:
                    raise
                self._on_exhausted("starting a thread for a call", error)
                return
        if len(self._started) < self.max_threads:
            self._check_armed = True
            self._loop.call_later(STALLED_S, self._check)

    def _start_thread(self, *, extra: bool) -> None:
        with self._lock:
            self._numbers += 1
            number = self._numbers
            self._started[number] = 0.0
        name = f"agentlog-call-{number}" if not extra else f"agentlog-call-extra-{number}"
        try:
            threading.Thread(target=self._work, args=(number, extra), name=name, daemon=True).start()
        except RuntimeError:
            self._leave(number)  # not counted as a thread waiting for work
            raise

    def _leave(self, number: int) -> None:
        with self._lock:
            self._started.pop(number, None)

    def _work(self, number: int, extra: bool) -> None:
        started = self._started
        while True:
            try:
                # A core thread waits for work as long as the pool lives (no timeout: idle, it holds
                # nothing but itself); close() wakes each with None.
                job = self._jobs.get(timeout=IDLE_EXIT_S) if extra else self._jobs.get()
            except queue.Empty:
                return self._leave(number)
            if job is None:
                return self._leave(number)
            future, fn, args, kwargs = job
            if future.cancelled():
                # No longer awaited before it started (its timeout, its run's cancel, the partition
                # lost): never started, so nothing of it is in doubt -- a retry, or the partition's
                # next owner, is its only execution. (A read across threads: a cancel landing just
                # after it is one landing as the call starts, as it always could.)
                continue
            started[number] = time.monotonic()
            set_awaited(future)  # cancelled() reads it (runtime.worker.cancellation)
            try:
                value, error = fn(*args, **kwargs), None
            except BaseException as exc:  # handed to the awaiting call, which records it
                value, error = None, exc
            set_awaited(None)
            started[number] = 0.0
            try:
                self._loop.call_soon_threadsafe(_settle, future, value, error)
            except RuntimeError:  # the loop is closed: the worker is shutting down
                return self._leave(number)

    def close(self) -> None:
        self._closed = True
        for _ in range(len(self._started)):
            self._jobs.put(None)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled, e.g. by a timeout: the late answer is dropped
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
