"""Carrying out one model or tool call: timeout, retries with backoff, results as events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ToolCallCompleted,
    ToolCallFailed,
)
from runtime.log.records.status import SKIPPED_IN_FORK
from runtime.models.deltas import DeltaSink
from runtime.worker.call_pool import CallPool
from runtime.worker.heartbeats import CallBeats
from runtime.worker.retrying import Then
from runtime.worker.streaming import in_thread
from runtime.worker.usage import usage_of
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.canonical import canonical_json
from runtime.workflow.intents import Intent


def _target(
    app: App, command: Intent
) -> tuple[Callable[..., Any], bool, RetryPolicy, dict[str, Any], list[Any]]:
    if command.kind == "model":
        model = app.models[command.name]
        args = command.args
        return model.fn, model.is_async, model.retry, dict(args["params"]), [args["messages"]]
    tool = app.tools[command.name]
    kwargs = dict(command.args)
    if tool.effect:
        kwargs["idempotency_key"] = command.key
    return tool.fn, tool.is_async, tool.retry, kwargs, []


async def attempt_once(
    app: App, command: Intent, pool: CallPool, beats: CallBeats | None = None, sink: DeltaSink | None = None
) -> Any:
    """One try of the call; raises what the call raised (or TimeoutError). ``beats``: a tool's
    heartbeats (runtime.worker.heartbeats), reported from inside it and its silence watched.
    ``sink``: a model's deltas (runtime.worker.streaming), bound in the pool thread of a sync one."""
    fn, is_async, policy, kwargs, positional = _target(app, command)
    if sink is not None and not is_async:
        fn = in_thread(fn, sink)
    if beats is not None:
        fn = beats.bound(fn, is_async)
    # Sync clients run in the pool's threads, so a slow call never blocks other runs.
    call = fn(*positional, **kwargs) if is_async else pool.run(fn, *positional, **kwargs)
    if beats is not None:
        call = beats.watched(call)
    if policy.timeout is None:
        return await call
    # asyncio.timeout's bookkeeping, without its context-manager class (a tenth of the cost of
    # a call that answers at once, twice per step): a timer cancels this task; a cancellation
    # that was the timer's becomes TimeoutError, any other (the partition was lost) stays one.
    task = asyncio.current_task()
    assert task is not None
    deadline = _Deadline(task)
    timer = asyncio.get_running_loop().call_later(policy.timeout, deadline.expire)
    try:
        return await call
    except asyncio.CancelledError:
        if deadline.expired and task.uncancel() == 0:
            raise TimeoutError(
                f"{command.kind} {command.name!r} took longer than {policy.timeout} s"
            ) from None
        raise
    finally:
        timer.cancel()


class _Deadline:
    __slots__ = ("expired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()


def retry_policy(app: App, command: Intent) -> RetryPolicy:
    # Not through _target: it copies the call's arguments, which the policy does not need.
    return (app.models[command.name] if command.kind == "model" else app.tools[command.name]).retry


def completed(
    command: Intent, result: Any, attempt: int, started: float
) -> ModelCallCompleted | ToolCallCompleted:
    latency = int((time.perf_counter() - started) * 1_000_000)
    text = canonical_json(result)
    if command.kind == "model":
        usage = usage_of(result)
        return ModelCallCompleted(
            run_id="",
            position=command.position,
            result=text,
            attempt=attempt,
            latency_us=latency,
            in_doubt=command.in_doubt,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            response_model=usage.response_model,
        )
    return ToolCallCompleted(
        run_id="",
        position=command.position,
        result=text,
        attempt=attempt,
        latency_us=latency,
        in_doubt=command.in_doubt,
    )


def skipped_in_fork(command: Intent) -> ToolCallCompleted:
    """What an effecting tool "returns" in a fork (runtime.client.RunHandle.fork): it was never called."""
    return ToolCallCompleted(run_id="", position=command.position, result=canonical_json(SKIPPED_IN_FORK))


def failed(command: Intent, error: BaseException, attempt: int, started: float, then: Then) -> Event:
    """The record of a failed attempt; ``then`` (runtime.worker.retrying) says whether it is final,
    when the next may start, and what to add to the error's message."""
    latency = int((time.perf_counter() - started) * 1_000_000)
    kind = ModelCallFailed if command.kind == "model" else ToolCallFailed
    return kind(
        run_id="",
        position=command.position,
        error_type=type(error).__name__,
        error=(str(error) or repr(error)) + then.note,
        attempt=attempt,
        latency_us=latency,
        final=then.final,
        in_doubt=command.in_doubt,
        retry_at=then.retry_at,
    )
