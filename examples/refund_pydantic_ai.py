"""The refund demo written as a PydanticAI agent, made durable on agentlog.

The same 40 steps as ``examples.refund_agent`` (lookups; effects at step 14 ``send_email``, 22
``refund`` 41.60, 30 ``create_ticket``), the same outside world (``REFUND_WORLD_DB``: every model
call and effect attempt counted, effects keyed by their idempotency key) and the same crash and hang
switches (``REFUND_CRASH_AT_STEP``, ``REFUND_HANG_AT_STEP``, ``REFUND_HANG_IN_EFFECT``, ...). What
differs is who drives: a plain ``pydantic_ai.Agent`` with tools, whose model decides each step
(41 model requests: one per step, and one for the final answer). The only agentlog lines are the
capability on the agent and ``run_agent`` in the workflow.

The model is a ``FunctionModel`` (no weights, no network): it writes its call to the world with a
fresh nonce, so a re-sent request shows up as a second row with another nonce. The nonce travels
as the tool call's id, so the run's result lists the nonces the agent saw.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples.refund_agent import (
    EFFECT_STEPS,
    _apply_effect,
    _crash_here,
    _db,
    _hang_seconds,
    _memory_calls,
    _nonces,
)
from runtime import App, Context
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent

app = App("refund-pydantic-ai")
_PROMPT = re.compile(r"order (?P<order>\S+), (?P<steps>\d+) steps")


def _request(messages: list[ModelMessage]) -> tuple[str, int]:
    """The order and step count the user prompt names."""
    first = messages[0]
    text = "".join(str(getattr(part, "content", "")) for part in first.parts)
    found = _PROMPT.search(text)
    if found is None:
        raise ValueError(f"the refund agent expects 'order N, S steps' in its prompt, got {text!r}")
    return found["order"], int(found["steps"])


async def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted planner: step n asks for step n's tool; after the last step, the answer."""
    step = sum(isinstance(message, ModelResponse) for message in messages) + 1
    order, steps = _request(messages)
    _crash_here("BEFORE_STEP", str(step))
    nonce = f"{_nonces.getrandbits(32):08x}"
    hang = _hang_seconds("AT_STEP", str(step))
    db = _db()
    if db is not None:
        db.execute("INSERT INTO model_calls (step, nonce, pid) VALUES (?, ?, ?)", (step, nonce, os.getpid()))
    else:
        _memory_calls.append((step, nonce))
    _crash_here("AT_STEP", str(step))
    if hang:
        await asyncio.sleep(hang)
    if step > steps:
        return ModelResponse(parts=[TextPart(f"order {order}: {steps} steps done")])
    tool = EFFECT_STEPS.get(step, "lookup")
    by_tool: dict[str, dict[str, Any]] = {
        "lookup": {"order": order, "step": step},
        "send_email": {"to": "customer@example.com", "template": "refund-started", "body": f"ref {nonce}"},
        "refund": {"order": order, "amount": 41.60, "reason": f"planner {nonce} approved"},
        "create_ticket": {"order": order, "queue": "billing", "summary": f"refund done ({nonce})"},
    }
    return ModelResponse(parts=[ToolCallPart(tool, by_tool[tool], tool_call_id=f"step{step}-{nonce}")])


durability = AgentlogDurability(
    app,
    # the arguments that identify each effect: a reworded reason or body keeps the key
    effects={
        "send_email": ("to", "template"),
        "refund": ("order", "amount"),
        "create_ticket": ("order", "queue"),
    },
)
agent = Agent(
    FunctionModel(plan),
    name="refund",
    instructions="Refund the order step by step; one tool per step.",
    capabilities=[durability],
)


@agent.tool_plain
async def lookup(order: str, step: int) -> dict[str, Any]:
    """Look the order up."""
    found = {"order": order, "step": step, "status": "delivered"}
    _crash_here("AFTER_STEP", str(step))
    return found


@agent.tool_plain
def send_email(to: str, template: str, body: str) -> dict[str, Any]:
    """Email the customer."""
    return _apply_effect("send_email", idempotency_key(), f"{to}:{template}")


@agent.tool_plain
def refund(order: str, amount: float, reason: str) -> dict[str, Any]:
    """Refund the order."""
    return _apply_effect("refund", idempotency_key(), f"{order}:{amount}")


@agent.tool_plain
def create_ticket(order: str, queue: str, summary: str) -> dict[str, Any]:
    """Open a ticket."""
    return _apply_effect("create_ticket", idempotency_key(), f"{order}:{queue}")


@app.workflow("refund")
async def refund_workflow(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    order = str(request["order"])
    steps = int(request.get("steps", 40))
    result = await run_agent(ctx, agent, f"order {order}, {steps} steps")
    nonces = [
        part.tool_call_id.split("-", 1)[1]
        for message in result.all_messages()
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]
    usage = result.usage
    return {
        "order": order,
        "steps": steps,
        "answer": result.output,
        "nonces": nonces,
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
