"""An OpenAI Agents SDK agent whose model streams, run with ``AgentlogRunner.run_streamed`` by real
worker subprocesses (tests/integration/test_agent_streams.py): its model streams a ``lookup``
call's arguments in two pieces, then the answer in three; the workflow reads the run's events,
then waits for ``go`` (the test kills the worker while it waits, so the next worker replays the
agent's steps). Each request stops after its first piece until the test creates ``release-<n>`` in
TEST_STREAM_DIR (n: 1 for the lookup, 2 for the answer), so the test sees deltas of a call that has
not ended. The model is stateless: it answers by what the input holds (a lookup's output or not),
so a restarted worker would answer as the first one did."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, function_tool
from agents.testing import assistant_message, function_call
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseTextDeltaEvent,
)

from runtime.integrations.openai_agents import AgentlogRunner
from runtime.workflow.app import App
from runtime.workflow.context import Context

app = App("stream-sdk-apps")
runner = AgentlogRunner(app, name="sdk")

ANSWER = ["refund ", "41", ".60"]
ARGS = ['{"order": ', '"A-1"}']


async def _released(n: int) -> None:
    while not (Path(os.environ["TEST_STREAM_DIR"]) / f"release-{n}").exists():
        await asyncio.sleep(0.02)


def _looked_up(input: Any) -> bool:
    items = input if isinstance(input, list) else []
    return any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)


def _completed(output: list[Any], n: int) -> ResponseCompletedEvent:
    response = Response(
        id=f"resp-{n}",
        created_at=0,
        model="streamer",
        object="response",
        output=output,
        tool_choice="auto",
        tools=[],
        parallel_tool_calls=False,
        status="completed",
    )
    return ResponseCompletedEvent(type="response.completed", response=response, sequence_number=n)


class StreamingModel(Model):
    """Streams its answer in pieces, held after the first until the test releases the request."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise AssertionError("the agent runs with run_streamed: its requests stream")

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        if not _looked_up(input):
            call = ResponseFunctionToolCall(
                type="function_call", id="c1", call_id="c1", name="lookup", arguments=""
            )
            yield ResponseOutputItemAddedEvent(
                type="response.output_item.added", item=call, output_index=0, sequence_number=0
            )
            for n, piece in enumerate(ARGS):
                if n:
                    await _released(1)
                yield ResponseFunctionCallArgumentsDeltaEvent(
                    type="response.function_call_arguments.delta",
                    delta=piece,
                    item_id="c1",
                    output_index=0,
                    sequence_number=n + 1,
                )
            yield _completed([function_call("lookup", {"order": "A-1"}, call_id="c1")], 3)
            return
        for n, piece in enumerate(ANSWER):
            if n:
                await _released(2)
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta",
                delta=piece,
                item_id="m1",
                output_index=0,
                content_index=0,
                logprobs=[],
                sequence_number=n,
            )
        yield _completed([assistant_message("".join(ANSWER))], 3)


@function_tool
def lookup(order: str) -> str:
    return f"order {order} is late"


agent = Agent(name="streamer", instructions="Refund late orders.", tools=[lookup], model=StreamingModel())


@app.workflow("sdk_stream")
async def sdk_stream(ctx: Context, request: dict[str, Any]) -> Any:
    kinds: list[str] = []
    result = await runner.run_streamed(
        ctx, agent, f"refund {request['order']}", on_event=lambda event: kinds.append(event.type)
    )
    await ctx.wait_signal("go")
    return {"output": result.final_output, "events": sorted(set(kinds))}
