"""A Temporal worker running the framework-agent workflow (``python -m bench.peers.agent_temporal_app
ADDRESS``): bench/peers/agent_temporal_workflows.py's ``AgentRun``, its client and worker with
``PydanticAIPlugin`` (the integration's data converter, sandbox settings and the agent's
activities), served as bench/peers/temporal_app.py serves (its pool size and sticky timeout).
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client

from bench.peers.agent_temporal_workflows import AgentRun
from bench.peers.temporal_app import serve


async def work(address: str) -> None:
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    await serve(client, [AgentRun], [])  # the plugin adds the agent's activities


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1]))
