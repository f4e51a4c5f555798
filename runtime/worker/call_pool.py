"""Threads for sync model and tool calls, answering straight into the event loop.

``asyncio.to_thread`` costs a concurrent Future, a context copy and a chained asyncio Future per
call, twice per agent step. This pool hands each call to a thread over a
queue and sets the loop's own future from the thread with one ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

_Job = tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled, e.g. by a timeout: the late answer is dropped
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class CallPool:
    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = 16) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"agentlog-call-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            try:
                value, error = fn(*args, **kwargs), None
            except BaseException as exc:  # handed to the awaiting call, which records it
                value, error = None, exc
            try:
                self._loop.call_soon_threadsafe(_settle, future, value, error)
            except RuntimeError:  # the loop is closed: the worker is shutting down
                return

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
