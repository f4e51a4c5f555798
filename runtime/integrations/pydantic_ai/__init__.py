"""PydanticAI agents made durable on agentlog.

Two lines change in a PydanticAI program: attach the capability to the agent, and run the agent
from an agentlog workflow::

    app = App("support")
    agent = Agent(model, name="refund", capabilities=[AgentlogDurability(app, effects={"refund": ("order",)})])

    @app.workflow("refund")
    async def refund(ctx: Context, request: dict[str, Any]) -> Any:
        result = await run_agent(ctx, agent, request["prompt"])
        return result.output

Inside the workflow every model request is agentlog's model call (the messages, settings and tool
definitions recorded as its prompt, the response and its token usage as its result) and every tool
call agentlog's tool call (a tool named in ``effects`` gets its idempotency key from the run; read it
with ``idempotency_key()``); MCP tool listings and other framework operations are recorded calls
too. A recovered worker replays them from the log: nothing completed is re-sent, nothing repeated.
``run_in_workflow(ctx, agent, body)`` runs your own code that drives the agent (``run_stream``,
``iter``) the same way; a streamed model request's text and tool arguments reach the run's watchers
as deltas while it streams (``runtime.models.deltas``). Outside a workflow the capability does nothing and the agent runs as usual. Needs the
``pydantic-ai`` extra. Built on PydanticAI's public ``pydantic_ai.durable_exec`` surface.
"""

from runtime.integrations.calls import UnrecordableValue, idempotency_key
from runtime.integrations.pydantic_ai.capability import AgentlogDurability, run_agent, run_in_workflow

__all__ = ["AgentlogDurability", "UnrecordableValue", "idempotency_key", "run_agent", "run_in_workflow"]
