"""The framework-agent workload (bench/peers/agent_workload.py) on agentlog: the PydanticAI agent
with ``AgentlogDurability`` (the effect tool named in ``effects``, keyed by the run and its
arguments, read with ``idempotency_key()``), run by the workflow ``agent`` (``run_agent``).
A worker serves it: ``agentlog worker --app bench.peers.agent_agentlog_app:app``."""

from __future__ import annotations

from typing import Any

from bench.peers import agent_workload
from runtime import App, Context
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent

app = App("agent-bench")
WORKFLOW = "agent"
agent = agent_workload.agent(
    agent_workload.tools(lambda run, step: idempotency_key()),
    [AgentlogDurability(app, effects={"effect": ("run", "step")})],
)


@app.workflow(WORKFLOW)
async def agent_workflow(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    await run_agent(ctx, agent, agent_workload.prompt(run))
    return agent_workload.result(run)
