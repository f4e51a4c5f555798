"""Unit tests of one call attempt: its result, its timeout, and cancellation (pure logic)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from runtime.worker.call_pool import CallPool
from runtime.worker.calls import attempt_once
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent

pytestmark = pytest.mark.unit

app = App("calls")


@app.tool("quick")
async def quick(value: int) -> dict[str, Any]:
    return {"value": value}


@app.tool("slow_async", retry=RetryPolicy(timeout=0.05))
async def slow_async(seconds: float) -> None:
    await asyncio.sleep(seconds)


@app.tool("slow_sync", retry=RetryPolicy(timeout=0.05))
def slow_sync(seconds: float) -> None:
    time.sleep(seconds)


CALL_STARTED: dict[str, asyncio.Event] = {}  # set by "announced" when its call begins


@app.tool("announced", retry=RetryPolicy(timeout=0.05))
async def announced(seconds: float) -> None:
    CALL_STARTED["announced"].set()
    await asyncio.sleep(seconds)


@app.tool("patient", retry=RetryPolicy(timeout=None))
async def patient(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


def tool_call(name: str, **args: Any) -> Intent:
    return Intent(1, "tool", name, args, "hash", DurableFuture(1))


async def attempt(command: Intent) -> Any:
    pool = CallPool(asyncio.get_running_loop(), threads=2)
    try:
        return await attempt_once(app, command, pool)
    finally:
        pool.close()


def test_an_answer_within_the_timeout_is_returned() -> None:
    assert asyncio.run(attempt(tool_call("quick", value=3))) == {"value": 3}
    assert asyncio.run(attempt(tool_call("patient", seconds=0.01))) == "done"


@pytest.mark.parametrize("name", ["slow_async", "slow_sync"])
def test_a_call_past_its_timeout_raises_timeout_error_naming_it(name: str) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"tool '{name}' took longer than 0.05 s"):
        asyncio.run(attempt(tool_call(name, seconds=1.0)))
    assert time.monotonic() - started < 0.9  # the wait was cut short, not sat out


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    """A lost partition cancels its calls: that must not be recorded as a timed-out call."""

    async def cancel_midway() -> None:
        started = CALL_STARTED["announced"] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(attempt(tool_call("announced", seconds=1.0)))
        await asyncio.wait_for(started.wait(), 5)  # the call is under way (and 0.05 s from its timeout)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancel_midway())
