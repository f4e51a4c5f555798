"""A PydanticAI agent that waits for an approval, in three versions, for the upgrade tests
(``--app support.pydantic_ai_apps:app_v1`` ...): ``v2`` changes the agent's instructions (drift),
``renamed`` renames its lookup tool (a change in what the run calls: it would park).

The model is a ``FunctionModel``: look the order up, ask to refund (a tool needing approval), and
answer once the refund is done. The refund counts itself in ``TEST_COUNTER_DIR``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runtime import App, Context
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent


def _make(instructions: str, lookup_name: str, version: str) -> App:
    app = App("pydantic-ai-upgrades")

    def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step == 0:
            return ModelResponse(parts=[ToolCallPart(lookup_name, {"order": "A-1"}, tool_call_id="look-1")])
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-1"}, tool_call_id="refund-1")])
        return ModelResponse(parts=[TextPart("refunded A-1")])

    agent = Agent(
        FunctionModel(plan),
        name="approver",
        instructions=instructions,
        output_type=[str, DeferredToolRequests],
        capabilities=[AgentlogDurability(app, effects={"refund": ("order",)}, prompt_version=version)],
    )

    async def lookup(order: str) -> str:
        return f"order {order} is late"

    agent.tool_plain(name=lookup_name)(lookup)

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        path = Path(os.environ["TEST_COUNTER_DIR"]) / f"refund-{idempotency_key()}"
        path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
        return f"refunded {order}"

    @app.workflow("approve")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        result = await run_agent(ctx, agent, f"refund {request['order']}", deferred_signal="approval")
        return {"answer": result.output}

    return app


app_v1 = _make("Refund late orders.", "lookup", "v1")
app_v2 = _make("Refund late orders, and apologise.", "lookup", "v2")
app_renamed = _make("Refund late orders.", "find_order", "v1")
