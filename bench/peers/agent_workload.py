"""The framework-agent workload bench/compare_agents.py runs on every engine: one PydanticAI agent
of 40 steps, the same model, tools and prompt everywhere; only the durability differs.

Each step is one model request and one tool call. The model is a ``FunctionModel`` in-process
(no weights, no network; the same in every engine, so none pays for an HTTP hop the others skip):
request n writes its row to the SQLite file (``workload.sync_planner``: a fresh nonce a call, so a
re-sent request shows) and asks for tool ``record`` -- or ``effect`` at steps 14, 22 and 30 --
with the run's name and the step; request 41 answers in text. The tools do the sync workload's
real work (``workload.sync_record`` / ``sync_effect``: one ``BEGIN IMMEDIATE ... COMMIT`` a call,
the effect ``INSERT OR IGNORE``s its idempotency key), so ``workload.replay_counts`` and the crash
switch (E2E_CRASH_VICTIM: a crash run's tool call of step 31 hangs until the SIGKILL) work as on
the sync workload. Each engine decorates the tools as it asks and derives the effect's key its
way (``tools(effect_key, wrap)``).

Imports PydanticAI and bench/peers/workload.py only: each engine's module adds its runtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AgentCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench.peers import workload

STEPS = workload.STEPS
NAME = "bench"  # the agent's name: its durable calls are named after it (agentlog, DBOS)
INSTRUCTIONS = "Work through the run step by step: call the tool the step needs, one tool a step."
RESULT_KEYS = ("run", "steps")
_PROMPT = re.compile(r"run (?P<run>\S+), (?P<steps>\d+) steps")


def prompt(run: str) -> str:
    return f"run {run}, {STEPS} steps"


def result(run: str) -> dict[str, Any]:
    """What every engine's workflow returns (bench/peers/agentlog_bench.py's check expects it)."""
    return {"run": run, "steps": STEPS}


def _asked(messages: list[ModelMessage]) -> tuple[str, int]:
    text = "".join(str(getattr(part, "content", "")) for part in messages[0].parts)
    found = _PROMPT.search(text)
    if found is None:
        raise ValueError(f"the bench agent expects 'run NAME, S steps' in its prompt, got {text!r}")
    return found["run"], int(found["steps"])


def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: step n asks for step n's tool (its row committed first); then the answer."""
    step = sum(isinstance(message, ModelResponse) for message in messages) + 1
    run, steps = _asked(messages)
    if step > steps:
        return ModelResponse(parts=[TextPart(f"run {run}: {steps} steps done")])
    decision = workload.sync_planner([], run=run, step=step)
    return ModelResponse(
        parts=[
            ToolCallPart(
                str(decision["next"]),
                {"run": run, "step": step},
                tool_call_id=f"s{step}-{decision['nonce']}",
            )
        ]
    )


def tools(
    effect_key: Callable[[str, int], str], wrap: Callable[[Callable[..., Any]], Any] = lambda f: f
) -> list[Any]:
    """The two tools, each through ``wrap`` (an engine's decorator, e.g. ``DBOS.step()``); the
    effect takes its idempotency key from ``effect_key(run, step)``."""

    def record(run: str, step: int) -> dict[str, Any]:
        """Record the step: commits one row."""
        return workload.sync_record(run, step)

    def effect(run: str, step: int) -> dict[str, Any]:
        """Apply the step's effect (once, by its idempotency key): commits it."""
        return workload.sync_effect(run, step, idempotency_key=effect_key(run, step))

    return [wrap(record), wrap(effect)]


def agent(tool_list: list[Any], capabilities: Sequence[AgentCapability[None]] = ()) -> Agent[None, str]:
    return Agent(
        FunctionModel(plan),
        name=NAME,
        instructions=INSTRUCTIONS,
        tools=tool_list,
        capabilities=list(capabilities),
    )


def run_key(run: str, step: int) -> str:
    """An effect's key from the run and the step (Restate's, DBOS's; agentlog derives its own)."""
    return f"{run}:{step}"
