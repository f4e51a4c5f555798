"""A run's cancel reaching its calls in flight, and what a tool sees of it (``cancelled()``).

The run machine records the cancel and stops the calls in flight (runtime.workflow.cancellation:
each gets its final ``...Failed`` record in the same completion). The worker then cancels their
tasks (:class:`CallTasks`), in the same turn of the loop, so no task can record an outcome after
that: an async call (a tool, a model SDK request) gets ``asyncio.CancelledError`` at its await at
once; a sync tool cannot be interrupted in its thread, but its answer is no longer awaited, and
:func:`cancelled` says so -- a tool that loops or waits checks it and stops::

    from runtime import cancelled

    @app.tool("bulk_email")
    def bulk_email(batch: list[str]) -> int:
        for sent, address in enumerate(batch):
            if cancelled():
                return sent
            send(address)
        return len(batch)

``cancelled()`` is also true when the call stopped being awaited for another reason (its timeout,
the partition lost): in each case whatever it returns is dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from runtime.log.records.events import Event, SignalReceived
from runtime.workflow.compensation import CANCEL_SIGNAL

# The loop's future of the sync call this thread runs (runtime.worker.call_pool), while it runs.
_calls = threading.local()


def cancelled() -> bool:
    """True once the call this tool runs in is no longer awaited: its run was cancelled (or the call
    timed out, or its worker lost the run's partition). False outside a call."""
    future: asyncio.Future[Any] | None = getattr(_calls, "future", None)
    if future is not None:  # a sync call in the pool's thread: its future is cancelled with its task
        return future.cancelled()
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop in this thread
        return False
    return task is not None and task.cancelling() > 0


def set_awaited(future: asyncio.Future[Any] | None) -> None:
    """Before (``future``) and after (None) a sync call in a pool thread: ``cancelled()`` there
    reads ``future``. Two plain calls, not a context manager: this is every sync call's path."""
    _calls.future = future


def cancels(records: Sequence[Event]) -> bool:
    """Whether ``records`` (one completion's) hold a cancel: the run's calls then in flight stop."""
    return any(type(e) is SignalReceived and e.name == CANCEL_SIGNAL for e in records)


class CallTasks:
    """The tasks of each run's model and tool calls in flight, to cancel with the run."""

    def __init__(self) -> None:
        self._runs: dict[str, set[asyncio.Task[None]]] = {}

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._runs

    def add(self, run_id: str, task: asyncio.Task[None]) -> None:
        tasks = self._runs.setdefault(run_id, set())
        tasks.add(task)
        task.add_done_callback(lambda done: self._done(run_id, done))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        tasks = self._runs.get(run_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._runs[run_id]

    def cancel(self, run_id: str) -> int:
        """Cancel the run's call tasks; how many there were."""
        tasks = self._runs.pop(run_id, set())
        for task in tasks:
            task.cancel()
        return len(tasks)
