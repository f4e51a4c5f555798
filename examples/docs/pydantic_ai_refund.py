"""A PydanticAI agent made durable (docs/integrations.md shows it in parts): the capability on the
agent, ``run_agent`` in the workflow, an effect keyed by its identifying arguments, and an approval
that waits for a signal. The model is PydanticAI's ``FunctionModel`` (no network); a real agent
names any PydanticAI model (``"openai:gpt-4o"``, ...). Runs on the in-memory log: ``python -m
examples.docs.pydantic_ai_refund``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runtime import App, Context, run_local
from runtime.client import Client
from runtime.config import Settings
from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker


class Payments:
    """The payment service: applies a refund once per idempotency key."""

    def __init__(self) -> None:
        self.refunds: dict[str, tuple[str, float]] = {}

    def refund(self, order: str, amount: float, idempotency_key: str) -> str:
        self.refunds.setdefault(idempotency_key, (order, amount))
        return f"refunded {amount} on {order}"


payments = Payments()


def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First ask for the refund, then answer."""
    if len(messages) == 1:
        call = ToolCallPart("refund", {"order": "A-1", "amount": 41.6, "reason": "late"}, tool_call_id="r1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart("refunded 41.6 on A-1")])


model = FunctionModel(plan)

# --8<-- [start:agent]
app = App("support")
agent = Agent(
    model,  # any PydanticAI model: "openai:gpt-4o", an Anthropic model, a FunctionModel in tests
    name="refund",  # names the agent's calls in the log: keep it stable
    capabilities=[AgentlogDurability(app, effects={"refund": ("order", "amount")})],
)


@agent.tool_plain
def refund(order: str, amount: float, reason: str) -> str:
    return payments.refund(order, amount, idempotency_key=idempotency_key())


@app.workflow("refund")
async def refund_flow(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    result = await run_agent(ctx, agent, request["prompt"])
    return {"answer": result.output, "tokens": result.usage.total_tokens}


# --8<-- [end:agent]


# --8<-- [start:approval]
approver = Agent(
    model,
    name="approver",
    output_type=[str, DeferredToolRequests],
    capabilities=[AgentlogDurability(app, effects={"refund": None})],
)


@approver.tool_plain(name="refund", requires_approval=True)
def refund_once_approved(order: str, amount: float, reason: str) -> str:
    return payments.refund(order, amount, idempotency_key=idempotency_key())


@app.workflow("refund_with_approval")
async def refund_with_approval(ctx: Context, request: dict[str, Any]) -> Any:
    result = await run_agent(ctx, approver, request["prompt"], deferred_signal="approval")
    return result.output


# --8<-- [end:approval]


def approve_later() -> Any:
    """Submit a run whose refund needs approval, see it wait, approve it: the refund runs once."""
    settings = Settings(partitions=1)
    log, serde = MemoryLog(settings), Serde.offline(settings)
    worker = Worker(app, settings, log=log, serde=serde, worker_id="docs", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="docs", log=log, serde=serde) as client:
            run = client.submit("refund_with_approval", {"prompt": "refund A-1, it is late"})
            time.sleep(0.5)
            assert run.status().status == "running"  # waiting for the approval
            assert len(payments.refunds) == 1  # only the first run's refund so far
            run.signal("approval", {"approvals": {"r1": True}})
            return run.result(timeout=20)
    finally:
        worker.stop()
        thread.join(timeout=10)


if __name__ == "__main__":
    result = run_local(app, "refund", {"prompt": "refund order A-1, it is late"})
    assert result["answer"] == "refunded 41.6 on A-1", result
    assert list(payments.refunds.values()) == [("A-1", 41.6)]
    assert approve_later() == "refunded 41.6 on A-1"
    assert len(payments.refunds) == 2  # each run's key is its own: the approved refund ran once
