"""The waiting benchmark's procurement agent as a PydanticAI ``Agent`` (bench/waiting.py
``--variant pydantic``), made durable as docs/integrations.md says: ``AgentlogDurability`` on the
agent, ``run_agent(..., deferred_signal=...)`` in the workflow.

The model is PydanticAI's in-process ``FunctionModel`` (no network). Its first answer asks for
the two effecting tools, both ``requires_approval=True``: the agent ends with
``DeferredToolRequests`` and the run waits for the approval signal, whose payload approves both
calls (``{"approvals": {"reserve": true, "place": true}}``). The approved tools then run, side by
side, and PydanticAI asks the model once more for its final text (a second model request the
native agent does not make: PydanticAI hands tool results back to the model). The tools write
the same rows as the native agent's (bench/waiting_app.py ``record_effect``).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.waiting_app import SIGNAL, record_effect
from runtime import App, Context
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent

app = App("waiting-bench-pydantic")
APPROVE_ALL = {"approvals": {"reserve": True, "place": True}}


def _order(messages: list[ModelMessage]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    prompt = next(part for part in first.parts if isinstance(part, UserPromptPart))
    return str(prompt.content).rsplit(" ", 1)[-1]


async def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First: reserve the budget and place the order (both need approval); then: done. Async, as
    the native agent's model is (and as a real model's HTTP client is): a sync function would run
    on PydanticAI's own thread pool (anyio, up to 40 threads), which is not what is measured."""
    if len(messages) == 1:
        order = _order(messages)
        return ModelResponse(
            parts=[
                ToolCallPart("reserve_budget", {"order": order, "amount": 1200.0}, tool_call_id="reserve"),
                ToolCallPart("place_order", {"order": order, "supplier": "acme"}, tool_call_id="place"),
            ]
        )
    return ModelResponse(parts=[TextPart(f"order {_order(messages)} placed")])


procurement = Agent(
    FunctionModel(plan),
    name="procurement",  # names the agent's calls in the log
    output_type=[str, DeferredToolRequests],
    capabilities=[AgentlogDurability(app, effects={"reserve_budget": ("order",), "place_order": ("order",)})],
)


@procurement.tool_plain(requires_approval=True)
def reserve_budget(order: str, amount: float) -> dict[str, Any]:
    return record_effect(order, "reserve_budget", idempotency_key(), "pydantic")


@procurement.tool_plain(requires_approval=True)
def place_order(order: str, supplier: str) -> dict[str, Any]:
    return record_effect(order, "place_order", idempotency_key(), "pydantic")


@app.workflow("procure")
async def procure(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    order = str(request["order"])
    result = await run_agent(ctx, procurement, f"procure the items of order {order}", deferred_signal=SIGNAL)
    return {"order": order, "answer": result.output}
