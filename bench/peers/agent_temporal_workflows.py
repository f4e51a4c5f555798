"""The framework-agent workload (bench/peers/agent_workload.py) as a Temporal workflow with
PydanticAI's Temporal integration (``pydantic_ai.durable_exec.temporal``), as its docs ask: the
``TemporalDurability`` capability on the agent (each model request and each function tool call one
activity), the agent listed in the workflow's ``__pydantic_ai_agents__`` so ``PydanticAIPlugin``
registers its activities on the worker (bench/peers/agent_temporal_app.py).

The activities run with the options bench/peers/temporal_workflows.py gives the end-to-end
workloads' (start-to-close 10 s, heartbeat 2 s, Temporal's default retry policy), so R is measured
with the settings a user would pick for a 40-step agent. The effect's key is the run and the step,
as Restate's and DBOS's are. This module runs in Temporal's workflow sandbox too, which re-imports
it; the agent's modules are passed through (the plugin passes PydanticAI's own).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability

    from bench.peers import agent_workload
    from bench.peers.temporal_workflows import HEARTBEAT, RETRY, START_TO_CLOSE

WORKFLOW = "AgentRun"
ACTIVITIES = workflow.ActivityConfig(
    start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT, retry_policy=RETRY
)
agent = agent_workload.agent(
    agent_workload.tools(agent_workload.run_key), [TemporalDurability(activity_config=ACTIVITIES)]
)


@workflow.defn(name=WORKFLOW)
class AgentRun(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, name: str) -> dict[str, Any]:
        await agent.run(agent_workload.prompt(name))
        return agent_workload.result(name)
