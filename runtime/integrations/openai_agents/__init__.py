"""OpenAI Agents SDK agents made durable on agentlog.

Two lines change in an Agents SDK program: make a runner for the app, and run the agent with it
from an agentlog workflow instead of ``Runner.run``::

    app = App("support")
    runner = AgentlogRunner(app, name="support", effects={"refund": ("order", "amount")})

    @app.workflow("support")
    async def support(ctx: Context, request: dict[str, Any]) -> Any:
        result = await runner.run(ctx, triage_agent, request["question"])
        return result.final_output

Every model call, function tool call and guardrail of the run (the agents reached by handoffs
included) is an agentlog call; a recovered worker replays them from the log, parallel tool calls
in their recorded order. Needs the ``openai-agents`` extra.
"""

from runtime.integrations.calls import UnrecordableValue, idempotency_key
from runtime.integrations.openai_agents.runner import AgentlogRunner

__all__ = ["AgentlogRunner", "UnrecordableValue", "idempotency_key"]
