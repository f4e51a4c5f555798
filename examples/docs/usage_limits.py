"""PydanticAI's limit of 50 model requests a run, met and raised (docs/integrations.md): a 60-step
agent fails before its 51st request unless the run passes its own ``UsageLimits``. The model is
PydanticAI's ``FunctionModel`` (no network). Runs on the in-memory log: ``python -m
examples.docs.usage_limits``."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from runtime import App, Context, run_local
from runtime.client import RunError
from runtime.integrations.pydantic_ai import AgentlogDurability, run_agent

STEPS = 60


def one_step_at_a_time(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A long agent: one tool call a request for STEPS requests, then the answer."""
    done = len(messages) // 2
    if done < STEPS:
        return ModelResponse(parts=[ToolCallPart("check", {"item": done}, tool_call_id=f"c{done}")])
    return ModelResponse(parts=[TextPart(f"checked {STEPS} items")])


app = App("inventory")
agent = Agent(FunctionModel(one_step_at_a_time), name="auditor", capabilities=[AgentlogDurability(app)])


@agent.tool_plain
def check(item: int) -> str:
    return f"item {item} ok"


# --8<-- [start:limit]
@app.workflow("audit_inventory")
async def audit_inventory(ctx: Context, request: dict[str, Any]) -> str:
    limits = UsageLimits(request_limit=request["request_limit"]) if "request_limit" in request else None
    result = await run_agent(ctx, agent, "check every item", usage_limits=limits)
    return str(result.output)


# --8<-- [end:limit]


if __name__ == "__main__":
    try:
        run_local(app, "audit_inventory", {})
        raise AssertionError("PydanticAI's default limit of 50 requests did not stop a 61-request run")
    except RunError as error:
        assert "request_limit of 50" in str(error), error
    assert run_local(app, "audit_inventory", {"request_limit": 200}) == f"checked {STEPS} items"
