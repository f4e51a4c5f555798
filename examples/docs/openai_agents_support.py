"""An OpenAI Agents SDK agent made durable (docs/integrations.md shows it in parts): triage hands
off to a refund agent whose refund is an effect keyed by its identifying arguments. The model is a
scripted ``agents.Model`` (no network); a real agent uses the SDK's OpenAI models. Runs on the
in-memory log: ``python -m examples.docs.openai_agents_support``."""

from __future__ import annotations

from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from agents.testing import assistant_message, function_call

from runtime import App, Context, run_local
from runtime.integrations.openai_agents import AgentlogRunner, idempotency_key


class Payments:
    """The payment service: applies a refund once per idempotency key."""

    def __init__(self) -> None:
        self.refunds: dict[str, tuple[str, float]] = {}

    def refund(self, order: str, amount: float, idempotency_key: str) -> str:
        self.refunds.setdefault(idempotency_key, (order, amount))
        return f"refunded {amount} on {order}"


payments = Payments()


class Scripted(Model):
    """Triage hands off; the refund agent looks the order up, refunds, then answers."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        done = (
            {
                item.get("call_id")
                for item in input
                if isinstance(item, dict) and item.get("type") == "function_call_output"
            }
            if isinstance(input, list)
            else set()
        )
        if self.agent == "triage":
            output = [function_call("transfer_to_refund_agent", {}, call_id="handoff")]
        elif "lookup" not in done:
            output = [function_call("lookup_order", {"order": "A-1"}, call_id="lookup")]
        elif "refund" not in done:
            output = [function_call("refund", {"order": "A-1", "amount": 41.6}, call_id="refund")]
        else:
            output = [assistant_message("refunded 41.6 on A-1")]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def lookup_order(order: str) -> str:
    return f"order {order} arrived late"


# --8<-- [start:runner]
app = App("support")
runner = AgentlogRunner(app, name="support", effects={"refund": ("order", "amount")})


@function_tool
def refund(order: str, amount: float) -> str:
    return payments.refund(order, amount, idempotency_key=idempotency_key())


refund_agent = Agent(
    name="refund_agent", instructions="...", tools=[lookup_order, refund], model=Scripted("refund_agent")
)
triage = Agent(name="triage", instructions="...", handoffs=[refund_agent], model=Scripted("triage"))


@app.workflow("support")
async def support(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    result = await runner.run(ctx, triage, request["question"])
    return {"answer": result.final_output, "agent": result.last_agent.name}


# --8<-- [end:runner]


if __name__ == "__main__":
    result = run_local(app, "support", {"question": "my order A-1 is late; refund it"})
    assert result == {"answer": "refunded 41.6 on A-1", "agent": "refund_agent"}, result
    assert list(payments.refunds.values()) == [("A-1", 41.6)]
