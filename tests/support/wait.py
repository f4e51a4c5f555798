"""Waiting on the thing itself -- a record in the log, a run's status, a file, a process -- with a deadline.

The short sleep inside ``wait_until`` is the poll interval of a wait on a condition; a test never
sleeps a fixed time and hopes something happened meanwhile.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

from runtime.client import Client

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    process: subprocess.Popen[bytes] | None = None,
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Fails after ``timeout`` seconds, or at once if ``process`` exits first (it was meant to make
    the condition true); ``detail`` adds context to the failure (e.g. the tail of a process log).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            value = condition()  # it may have happened just before the exit
            if value:
                return value
            raise AssertionError(
                f"process {process.pid} exited ({process.returncode}) before {what}{_extra(detail)}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{_extra(detail)}")
        time.sleep(interval)


async def until(condition: Callable[[], T], timeout: float = 5.0, what: str = "condition") -> T:
    """``wait_until`` inside a coroutine: yields to the event loop while it waits (the condition
    may need the loop's own callbacks to come true). Fails after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.001)


def _extra(detail: Callable[[], str] | None) -> str:
    # Asked for once, on failure: a detail may be costly (a read of the log, a walk of the heap).
    return f"\n{detail()}" if detail is not None else ""


def wait_for_event(client: Client, run_id: str, event_type: str, count: int = 1, timeout: float = 30) -> None:
    """Until the run's history holds ``count`` events of ``event_type``."""
    wait_until(
        lambda: [e["type"] for e in client.run(run_id).history()].count(event_type) >= count,
        timeout,
        f"{count} x {event_type} in run {run_id}",
        interval=0.1,
        detail=lambda: str([e["type"] for e in client.run(run_id).history()]),
    )


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM, and SIGKILL if it has not exited within ``timeout``; returns its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
