"""An OpenAI Agents SDK app the crash tests run in worker subprocesses
(``--app support.agents_apps:app``): a triage agent hands off to a refund agent that makes two
parallel lookups per step, a refund at step ``REFUND_STEP`` and answers after ``STEPS`` steps.

The model is stateless (a restarted worker must answer the in-doubt request as the first one
would): it reads the step from the call ids already in the input (``s<step>-...``). Its outside
world is a SQLite file (``AGENTS_WORLD_DB``) counting every model request it received and every
effect attempt; ``AGENTS_HANG_AT_STEP=N`` makes the first request of step N hang (after it is
counted) so a test can kill the worker there.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from agents.testing import assistant_message, function_call

from runtime import App, Context
from runtime.integrations.openai_agents import AgentlogRunner, idempotency_key

STEPS = 8
REFUND_STEP = 5
app = App("agents-crash")
runner = AgentlogRunner(app, name="support", effects={"refund": ("order", "amount")})
_STEP_ID = re.compile(r"^s(\d+)-")


def world() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["AGENTS_WORLD_DB"], timeout=30, isolation_level=None)
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS model_calls (id INTEGER PRIMARY KEY, agent TEXT, step INTEGER, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effect_attempts (id INTEGER PRIMARY KEY, idempotency_key TEXT, pid INTEGER);
        CREATE TABLE IF NOT EXISTS effects (idempotency_key TEXT PRIMARY KEY, detail TEXT);
        """
    )
    return conn


def _step_of(input: Any) -> int:
    """The next step: one past the highest ``s<step>-`` call id the input holds."""
    steps = [0]
    for item in input if isinstance(input, list) else []:
        call_id = item.get("call_id") if isinstance(item, dict) else getattr(item, "call_id", None)
        found = _STEP_ID.match(call_id or "")
        if found:
            steps.append(int(found[1]) + 1)
    return max(steps)


class StepModel(Model):
    """Answers by step: triage hands off; the refund agent looks up twice in parallel per step,
    refunds at REFUND_STEP, and answers after STEPS steps."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        step = _step_of(input)
        db = world()
        db.execute(
            "INSERT INTO model_calls (agent, step, pid) VALUES (?, ?, ?)", (self.agent, step, os.getpid())
        )
        hang = os.environ.get("AGENTS_HANG_AT_STEP")
        marker = Path(os.environ["AGENTS_WORLD_DB"] + f".hang-{hang}")
        if hang == str(step) and self.agent == "refund_agent" and not marker.exists():
            marker.write_text(str(os.getpid()))
            await asyncio.sleep(60)
        if self.agent == "triage":
            output = [function_call("transfer_to_refund_agent", {}, call_id="s0-handoff")]
        elif step > STEPS:
            output = [assistant_message(f"refunded after {STEPS} steps")]
        elif step == REFUND_STEP:
            output = [function_call("refund", {"order": "A-1", "amount": 41.6}, call_id=f"s{step}-refund")]
        else:
            output = [
                function_call("lookup_order", {"order": "A-1", "step": step}, call_id=f"s{step}-order"),
                function_call(
                    "lookup_customer", {"customer": "bob", "step": step}, call_id=f"s{step}-customer"
                ),
            ]
        usage = Usage(requests=1, input_tokens=10 * step + 5, output_tokens=3, total_tokens=10 * step + 8)
        return ModelResponse(output=output, usage=usage, response_id=f"r{step}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
async def lookup_order(order: str, step: int) -> str:
    await asyncio.sleep(0.01)  # the two lookups of a step overlap
    return f"order {order} is late (step {step})"


@function_tool
async def lookup_customer(customer: str, step: int) -> str:
    return f"customer {customer} is gold (step {step})"


@function_tool
def refund(order: str, amount: float) -> str:
    key = idempotency_key()
    db = world()
    db.execute("INSERT INTO effect_attempts (idempotency_key, pid) VALUES (?, ?)", (key, os.getpid()))
    db.execute(
        "INSERT OR IGNORE INTO effects (idempotency_key, detail) VALUES (?, ?)", (key, f"{order}:{amount}")
    )
    return f"refunded {amount} on {order}"


refund_agent = Agent(
    name="refund_agent",
    instructions="Look the order and the customer up, then refund.",
    tools=[lookup_order, lookup_customer, refund],
    model=StepModel("refund_agent"),
)
triage = Agent(
    name="triage",
    instructions="Send refunds to the refund agent.",
    handoffs=[refund_agent],
    model=StepModel("triage"),
)


@app.workflow("support")
async def support(ctx: Context, request: dict[str, Any]) -> Any:
    result = await runner.run(ctx, triage, request["question"], max_turns=STEPS + 4)
    return {"answer": result.final_output, "agent": result.last_agent.name}
