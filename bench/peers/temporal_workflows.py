"""The end-to-end workloads (bench/peers/workload.py) as Temporal workflows (temporalio).

Each model call and each tool call is one activity: Temporal records its result in the workflow's
history before the workflow goes on, as Restate journals a ``ctx.run`` and agentlog appends a
call's completion. ``E2E`` is the async workload, ``E2ESync`` the sync one; an effect's idempotency
key is the run and step, as bench/peers/restate_app.py derives its. Activities are called by name
(bench/peers/temporal_app.py defines them): this module runs in Temporal's workflow sandbox, which
re-imports it for every workflow and must not see the tool's SQLite.

Activity options, the ones a Temporal user would pick for the steps of a 40-step agent (each step
takes milliseconds here; a real model call takes seconds):
- ``start_to_close_timeout`` 10 s: an attempt that has not finished by then is failed and retried;
- ``heartbeat_timeout`` 2 s: an attempt whose worker died is noticed 2 s after its start (or its
  last heartbeat) instead of at the 10 s above -- a short activity finishes before it would have
  to heartbeat, so none of these do;
- the retry policy is Temporal's default (first retry after 1 s, backoff 2.0, at most 100 s
  apart, no limit of attempts): a user keeps it, an agent's step must not be given up on.
The workflow task side: the worker's sticky queue schedule-to-start timeout is 1 s (temporalio's
default is 10 s), so a workflow cached on a dead worker moves to a live one after 1 s
(bench/peers/temporal_app.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

STEPS = 40  # bench/peers/workload.py's, not imported: the sandbox re-imports what this imports
TASK_QUEUE = "e2e"
START_TO_CLOSE = timedelta(seconds=10)
HEARTBEAT = timedelta(seconds=2)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0)


async def _activity(name: str, *args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await workflow.execute_activity(
        name,
        args=list(args),
        task_queue=TASK_QUEUE,
        start_to_close_timeout=START_TO_CLOSE,
        heartbeat_timeout=HEARTBEAT,
        retry_policy=RETRY,
        result_type=dict,
    )
    return result


def _messages(step: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"step {step}"}]


@workflow.defn(name="E2E")
class E2E:
    @workflow.run
    async def run(self, name: str) -> dict[str, Any]:
        for step in range(1, STEPS + 1):
            await _activity("planner", _messages(step), name, step)
            await _activity("record", name, step)
        return {"run": name, "steps": STEPS}


@workflow.defn(name="E2ESync")
class E2ESync:
    @workflow.run
    async def run(self, name: str) -> dict[str, Any]:
        for step in range(1, STEPS + 1):
            decision = await _activity("sync_planner", _messages(step), name, step)
            if decision["next"] == "effect":
                await _activity("sync_effect", name, step, f"{name}:{step}")
            else:
                await _activity("sync_record", name, step)
        return {"run": name, "steps": STEPS}


WORKFLOWS = {"async": "E2E", "sync": "E2ESync"}
