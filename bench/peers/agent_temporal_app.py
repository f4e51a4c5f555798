"""A Temporal worker running the framework-agent workflow (``python -m bench.peers.agent_temporal_app
ADDRESS``): bench/peers/agent_temporal_workflows.py's ``AgentRun``, its client and worker with
``PydanticAIPlugin`` (the integration's data converter, sandbox settings and the agent's
activities). Sync activities (the tools) run in a pool of bench/peers/temporal_app.py's size, the
sticky queue's timeout is its 1 s.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client
from temporalio.worker import Worker

from bench.peers.agent_temporal_workflows import AgentRun
from bench.peers.temporal_app import STICKY_TIMEOUT, THREADS
from bench.peers.temporal_workflows import TASK_QUEUE


async def work(address: str) -> None:
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[AgentRun],
            activity_executor=pool,
            max_concurrent_activities=THREADS,
            sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        )
        await worker.run()


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1]))
