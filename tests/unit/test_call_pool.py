"""The call pool's size: asyncio's default for calls that work, more threads only for calls that
wait (runtime.worker.call_pool). Real threads, no broker."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from runtime.worker import call_pool
from runtime.worker.call_pool import CallPool, core_threads
from support.wait import until

pytestmark = pytest.mark.unit


def busy(seconds: float) -> float:
    """A call that works (holds its thread on the CPU, no waiting)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return seconds


async def test_short_calls_run_on_asyncio_s_default_number_of_threads() -> None:
    # 100 us calls, on threads that take the next one within a millisecond: none runs anywhere
    # near STALLED_S, however many are queued.
    pool = CallPool(asyncio.get_running_loop())
    try:
        assert pool.threads == core_threads()
        for _ in range(5):  # far more calls than threads, each done in 100 us
            await asyncio.gather(*(pool.run(busy, 0.0001) for _ in range(200)))
        assert pool.threads == core_threads(), "calls that finish quickly must not grow the pool"
    finally:
        pool.close()


async def test_a_busy_event_loop_is_not_taken_for_waiting_threads() -> None:
    pool = CallPool(asyncio.get_running_loop(), threads=2, max_threads=16)
    try:
        # Calls queued for longer than STALLED_S, answered by the threads all along, while the
        # loop cannot take their answers (blocked, as by a takeover's replay).
        calls = [pool.run(busy, 0.001) for _ in range(300)]
        busy(call_pool.STALLED_S * 4)
        await asyncio.gather(*calls)
        await asyncio.sleep(call_pool.STALLED_S * 2)
        assert pool.threads == 2
    finally:
        pool.close()


async def test_calls_that_wait_get_a_thread_each_beyond_the_core_size() -> None:
    pool = CallPool(asyncio.get_running_loop(), threads=2, max_threads=20)
    release = threading.Event()
    waiting = 0
    lock = threading.Lock()

    def wait_for_answer() -> str:  # a sync SDK's request: blocked, not working
        nonlocal waiting
        with lock:
            waiting += 1
        release.wait(10)
        return "answered"

    try:
        calls = [pool.run(wait_for_answer) for _ in range(12)]
        await until(lambda: waiting == 12, 5, "12 waiting calls started (the pool to grow)")
        assert pool.threads == 12
        release.set()
        assert await asyncio.gather(*calls) == ["answered"] * 12
    finally:
        release.set()
        pool.close()


async def test_growth_stops_at_max_threads() -> None:
    pool = CallPool(asyncio.get_running_loop(), threads=1, max_threads=4)
    release = threading.Event()
    try:
        calls = [pool.run(release.wait, 10) for _ in range(10)]
        await asyncio.sleep(call_pool.STALLED_S * 6)
        assert pool.threads == 4
        release.set()
        assert await asyncio.gather(*calls) == [True] * 10  # the rest ran on the four threads
    finally:
        release.set()
        pool.close()


async def test_threads_started_for_waiting_calls_leave_once_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_pool, "IDLE_EXIT_S", 0.1)
    pool = CallPool(asyncio.get_running_loop(), threads=1, max_threads=8)
    release = threading.Event()
    try:
        calls = [pool.run(release.wait, 10) for _ in range(5)]
        await until(lambda: pool.threads >= 5, 5, "a thread per waiting call")
        assert pool.threads == 5
        release.set()
        await asyncio.gather(*calls)
        await until(lambda: pool.threads <= 1, 5, "the extra threads to leave")
        assert pool.threads == 1, "the core thread stays, the extra ones leave"
        assert await pool.run(busy, 0.0) == 0.0
    finally:
        release.set()
        pool.close()


async def test_a_call_no_longer_awaited_before_it_starts_never_runs() -> None:
    # One thread, held by a call that waits; the next call queued behind it times out (its task is
    # cancelled, which cancels the pool's future) before a thread takes it: it must never run --
    # its retry (or the partition's next owner) is its only execution, so an effect is not applied
    # twice when a worker is overloaded.
    pool = CallPool(asyncio.get_running_loop(), threads=1, max_threads=1)
    release = threading.Event()
    ran: list[str] = []
    try:
        holding = pool.run(release.wait, 10)
        queued = asyncio.ensure_future(pool.run(ran.append, "timed out while queued"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(queued, 0.05)
        release.set()
        await holding
        assert await pool.run(ran.append, "the retry") is None
        assert ran == ["the retry"], "the call cancelled while queued ran anyway"
    finally:
        release.set()
        pool.close()


async def test_a_call_cancelled_once_it_runs_still_runs_to_its_end() -> None:
    # A sync call cannot be interrupted in its thread: cancelled while it runs, it goes on (its
    # answer is dropped). That one is in doubt, as before.
    pool = CallPool(asyncio.get_running_loop(), threads=1, max_threads=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def call() -> None:
        started.set()
        release.wait(10)
        ran.append("ran")

    try:
        running = asyncio.ensure_future(pool.run(call))
        await until(started.is_set, 5, "the call to start")
        running.cancel()
        release.set()
        await until(lambda: ran == ["ran"], 5, "the call to finish")
        assert running.cancelled()
    finally:
        release.set()
        pool.close()
