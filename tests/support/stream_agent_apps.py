"""A PydanticAI agent that streams, run from a workflow by real worker subprocesses
(tests/integration/test_agent_streams.py): its model streams a ``lookup`` call's arguments in two
pieces, then the answer in three; the workflow reads ``run_stream``'s text, then waits for ``go``
(the test kills the worker while it waits, so the next worker replays the agent's steps). Each
request stops after its first piece until the test creates ``release-<n>`` in TEST_STREAM_DIR
(n: 1 for the lookup, 2 for the answer), so the test sees deltas of a call that has not ended."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from runtime.integrations.pydantic_ai import AgentlogDurability, run_in_workflow
from runtime.workflow.app import App
from runtime.workflow.context import Context

app = App("stream-agent-apps")

ANSWER = ["refund ", "41", ".60"]


async def _released(n: int) -> None:
    while not (Path(os.environ["TEST_STREAM_DIR"]) / f"release-{n}").exists():
        await asyncio.sleep(0.02)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    if not any(isinstance(m, ModelResponse) for m in messages):
        yield {0: DeltaToolCall(name="lookup", json_args='{"order": ', tool_call_id="c1")}
        await _released(1)
        yield {0: DeltaToolCall(json_args='"A-1"}')}
    else:
        yield ANSWER[0]
        await _released(2)
        for piece in ANSWER[1:]:
            yield piece


def _unstreamed(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("the agent streams its requests")


agent = Agent(
    FunctionModel(_unstreamed, stream_function=_stream),
    name="streamer",
    capabilities=[AgentlogDurability(app)],
)


@agent.tool_plain
def lookup(order: str) -> str:
    return f"order {order} is late"


@app.workflow("agent_stream")
async def agent_stream(ctx: Context, request: dict[str, Any]) -> Any:
    async def answer() -> dict[str, Any]:
        async with agent.run_stream(f"refund {request['order']}") as result:
            texts = [text async for text in result.stream_text(delta=True)]
            return {"texts": texts, "output": await result.get_output()}

    answered = await run_in_workflow(ctx, agent, answer)
    await ctx.wait_signal("go")
    return answered
