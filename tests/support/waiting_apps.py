"""A PydanticAI procurement agent that waits for an approval, for the tests of many framework runs
waiting on one worker (``--app support.waiting_apps:app``): one quote (a tool), an order that
needs approval (the run waits for the signal ``approval``), then the order is placed (an effect,
counted in ``TEST_COUNTER_DIR``) and the agent answers.

Everything is async (the model too), so the worker runs no thread for the calls: what the tests
count as the worker's threads and descriptors is the waiting runs' cost, not a call pool's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runtime import App, Context
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent

APPROVAL = {"approvals": {"order-1": True}}  # the signal's payload that approves a run's order

app = App("waiting-procurement")


async def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = sum(isinstance(m, ModelResponse) for m in messages)
    if step == 0:
        return ModelResponse(parts=[ToolCallPart("quote", {"item": "laptop"}, tool_call_id="quote-1")])
    if step == 1:
        return ModelResponse(parts=[ToolCallPart("order", {"item": "laptop"}, tool_call_id="order-1")])
    return ModelResponse(parts=[TextPart("ordered")])


agent = Agent(
    FunctionModel(plan),
    name="procurer",
    instructions="Buy what is asked for, once approved.",
    output_type=[str, DeferredToolRequests],
    capabilities=[AgentlogDurability(app, effects={"order": ("item",)})],
)


@agent.tool_plain
async def quote(item: str) -> str:
    return f"{item}: 900 EUR"


@agent.tool_plain(requires_approval=True)
async def order(item: str) -> str:
    path = Path(os.environ["TEST_COUNTER_DIR"]) / f"order-{idempotency_key().replace('/', '_')}"
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    return f"ordered {item}"


@app.workflow("procure")
async def procure(ctx: Context, request: dict[str, Any]) -> Any:
    result = await run_agent(ctx, agent, f"buy a {request['item']}", deferred_signal="approval")
    return {"answer": result.output}
