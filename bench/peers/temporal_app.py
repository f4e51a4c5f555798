"""A Temporal worker running the end-to-end workloads (``python -m bench.peers.temporal_app
ADDRESS``): bench/peers/temporal_workflows.py's workflows, and bench/peers/workload.py's functions
as its activities -- the same model and tool functions agentlog, Restate and DBOS run.

The async model (``planner``) is an async activity, on the worker's event loop; the sync model and
tools run in the worker's activity thread pool, ``THREADS`` threads (the size asyncio's default
executor gets here, ``min(32, cpus + 4)``, as agentlog's call pool and Restate's SDK executor
start), with as many activities at once. The worker's sticky queue schedule-to-start timeout is
1 s: see bench/peers/temporal_workflows.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from bench.peers import workload
from bench.peers.temporal_workflows import E2E, TASK_QUEUE, E2ESync

THREADS = min(32, (os.cpu_count() or 1) + 4)
STICKY_TIMEOUT = timedelta(seconds=1)


@activity.defn(name="planner")
async def planner(messages: list[dict[str, Any]], run: str, step: int) -> dict[str, Any]:
    return await workload.planner(messages, run=run, step=step)


@activity.defn(name="record")
def record(run: str, step: int) -> dict[str, Any]:
    return workload.record(run, step)


@activity.defn(name="sync_planner")
def sync_planner(messages: list[dict[str, Any]], run: str, step: int) -> dict[str, Any]:
    return workload.sync_planner(messages, run=run, step=step)


@activity.defn(name="sync_record")
def sync_record(run: str, step: int) -> dict[str, Any]:
    return workload.sync_record(run, step)


@activity.defn(name="sync_effect")
def sync_effect(run: str, step: int, idempotency_key: str) -> dict[str, Any]:
    return workload.sync_effect(run, step, idempotency_key)


async def serve(client: Client, workflows: list[type], activities: list[Any]) -> None:
    """A worker on ``TASK_QUEUE`` as every Temporal benchmark here runs one: sync activities in a
    pool of ``THREADS``, as many at once, the sticky queue's timeout ``STICKY_TIMEOUT``."""
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=workflows,
            activities=activities,
            activity_executor=pool,
            max_concurrent_activities=THREADS,
            sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        )
        await worker.run()


async def work(address: str) -> None:
    client = await Client.connect(address)
    await serve(client, [E2E, E2ESync], [planner, record, sync_planner, sync_record, sync_effect])


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1]))
