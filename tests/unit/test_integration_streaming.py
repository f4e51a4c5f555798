"""Framework agents that stream, run from a workflow on the in-memory worker with a delta sink
bound (support.memory_worker): a PydanticAI agent's ``run_stream`` and ``iter`` (its model's
stream emitted as deltas inside the recorded call), the Agents SDK's ``run_streamed``. The run's
result is right, each model request is one recorded call, and a replay of the history -- with a
sink bound around it -- emits nothing and asks no model."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from runtime.config import Settings
from runtime.integrations.openai_agents import AgentlogRunner
from runtime.integrations.pydantic_ai import AgentlogDurability, run_agent, run_in_workflow
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled
from runtime.log.records.responses import full_text
from runtime.models.deltas import Delta, deltas_to
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_worker import serving

pytestmark = pytest.mark.unit

ANSWER = ["refund ", "41", ".60"]


def _record(app: App, workflow: str, sink: list[Delta]) -> tuple[Any, list[Event]]:
    with serving(app, Settings(partitions=1), sink=sink.append) as (client, _log):
        handle = client.submit(workflow, {"order": "A-1"})
        result = handle.result(timeout=30)
        return result, [e.event for e in handle.events()]


def _replay_emits_nothing(app: App, history: list[Event]) -> Any:
    emitted: list[Delta] = []
    with deltas_to(emitted.append):
        replayed = Replayer(app=app).replay(history)
    assert replayed.ok and replayed.drift == (), replayed
    assert emitted == []
    return replayed.result


# --- PydanticAI -------------------------------------------------------------------------------
def pydantic_ai_app(asked: list[int], handled: list[str] | None = None) -> App:
    """An agent whose model streams a lookup call (its arguments in two pieces), then the answer
    in three; ``asked`` counts the requests the model really got. With ``handled``, the agent has
    an ``event_stream_handler`` that notes the kinds of the events it sees."""
    app = App("pydantic-ai-streaming")

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            assert handled is not None
            handled.append(type(event).__name__)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        asked.append(step)
        if step == 0:
            yield {0: DeltaToolCall(name="lookup", json_args='{"order": ', tool_call_id="c1")}
            yield {0: DeltaToolCall(json_args='"A-1"}')}
        else:
            for piece in ANSWER:
                yield piece

    def unstreamed(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("the agent streams its requests")

    agent = Agent(
        FunctionModel(unstreamed, stream_function=stream),
        name="streamer",
        capabilities=[AgentlogDurability(app, event_stream_handler=handler if handled is not None else None)],
    )

    @agent.tool_plain
    def lookup(order: str) -> str:
        return f"order {order} is late"

    @app.workflow("run_stream")
    async def with_run_stream(ctx: Context, request: dict[str, Any]) -> Any:
        async def answer() -> dict[str, Any]:
            async with agent.run_stream(f"refund {request['order']}") as result:
                texts = [text async for text in result.stream_text(delta=True)]
                return {"texts": texts, "output": await result.get_output()}

        return await run_in_workflow(ctx, agent, answer)

    @app.workflow("run")
    async def with_run(ctx: Context, request: dict[str, Any]) -> Any:
        return {"output": (await run_agent(ctx, agent, f"refund {request['order']}")).output}

    @app.workflow("iter")
    async def with_iter(ctx: Context, request: dict[str, Any]) -> Any:
        async def answer() -> dict[str, Any]:
            kinds: list[str] = []
            async with agent.iter(f"refund {request['order']}") as run:
                async for node in run:
                    if Agent.is_model_request_node(node):
                        async with node.stream(run.ctx) as events:
                            kinds += [type(event).__name__ async for event in events]
                assert run.result is not None
                return {"streamed": "PartStartEvent" in kinds, "output": run.result.output}

        return await run_in_workflow(ctx, agent, answer)

    return app


@pytest.mark.parametrize("workflow", ["run_stream", "iter"])
def test_a_pydantic_ai_agent_streams_deltas_live_and_a_replay_emits_nothing(workflow: str) -> None:
    asked: list[int] = []
    deltas: list[Delta] = []
    result, history = _record(pydantic_ai_app(asked), workflow, deltas)
    assert result["output"] == "".join(ANSWER)
    if workflow == "run_stream":
        assert "".join(result["texts"]) == "".join(ANSWER)  # the recorded answer, streamed back
    else:
        assert result["streamed"]
    assert asked == [0, 1]
    tools = [d for d in deltas if d.kind == "tool_args"]
    assert tools[0].name == "lookup" and {d.index for d in tools} == {0}
    assert json.loads("".join(d.text for d in tools)) == {"order": "A-1"}
    assert [d.text for d in deltas if d.kind == "text"] == ANSWER  # in order, piece by piece
    calls = [e.model for e in history if isinstance(e, ModelCallScheduled)]
    assert calls == ["streamer.model", "streamer.model"]  # one recorded call per request
    fresh_asked: list[int] = []
    assert _replay_emits_nothing(pydantic_ai_app(fresh_asked), history) == result
    assert fresh_asked == []


def test_a_pydantic_ai_event_stream_handler_still_sees_every_event_while_deltas_are_emitted() -> None:
    """``run_agent`` with an ``event_stream_handler`` streams its requests: the deltas go out and
    the handler sees the model's events as before (the deltas are taken on the way through)."""
    handled: list[str] = []
    deltas: list[Delta] = []
    result, history = _record(pydantic_ai_app([], handled), "run", deltas)
    assert result == {"output": "".join(ANSWER)}
    assert [d.text for d in deltas if d.kind == "text"] == ANSWER
    assert handled.count("PartDeltaEvent") >= len(ANSWER) and "FunctionToolCallEvent" in handled
    handled_again: list[str] = []
    assert _replay_emits_nothing(pydantic_ai_app([], handled_again), history) == result
    assert handled_again == []


def test_a_pydantic_ai_agents_deltas_change_nothing_recorded() -> None:
    """The same run with no sink (a local run, a worker nobody watches): the same result and the
    same recorded responses (but for the clock's readings), nothing emitted."""
    watched, watched_history = _record(pydantic_ai_app([]), "run_stream", [])
    with serving(pydantic_ai_app([]), Settings(partitions=1)) as (client, _log):
        handle = client.submit("run_stream", {"order": "A-1"})
        assert handle.result(timeout=30) == watched
        unwatched = [e.event for e in handle.events()]
    recorded = [
        # read whole (runtime.log.records.responses): the short form holds times as numbers
        [_without_timestamps(full_text(e)) for e in history if isinstance(e, ModelCallCompleted)]
        for history in (watched_history, unwatched)
    ]
    assert len(recorded[0]) == 2 and recorded[0] == recorded[1]


def _without_timestamps(result: str) -> str:
    return re.sub(r'"(timestamp|request_timestamp|duration)":\s*"[^"]*"', "", result)


# --- OpenAI Agents SDK ------------------------------------------------------------------------
class CountingModel(ScriptedModel):
    """The SDK's scripted model, counting the requests it really got (streamed or not)."""

    def __init__(self, steps: list[Any], asked: list[str]) -> None:
        super().__init__(steps)
        self.asked = asked

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.asked.append("get_response")
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.asked.append("stream_response")
        async for event in super().stream_response(*args, **kwargs):
            yield event


def agents_app(asked: list[str]) -> App:
    app = App("agents-streaming")
    runner = AgentlogRunner(app, name="support")

    @function_tool
    def lookup(order: str) -> str:
        return f"order {order} is late"

    agent = SdkAgent(
        name="refund_agent",
        instructions="Refund late orders.",
        tools=[lookup],
        model=CountingModel(
            [
                [function_call("lookup", {"order": "A-1"}, call_id="c1")],
                [assistant_message("".join(ANSWER))],
            ],
            asked,
        ),
    )

    @app.workflow("run_streamed")
    async def with_run_streamed(ctx: Context, request: dict[str, Any]) -> Any:
        kinds: list[str] = []
        result = await runner.run_streamed(
            ctx, agent, f"refund {request['order']}", on_event=lambda event: kinds.append(event.type)
        )
        return {"output": result.final_output, "items": "run_item_stream_event" in kinds}

    @app.workflow("run")
    async def with_run(ctx: Context, request: dict[str, Any]) -> Any:
        result = await runner.run(ctx, agent, f"refund {request['order']}")
        return {"output": result.final_output, "items": True}

    return app


def test_an_agents_sdk_run_streamed_streams_deltas_live_and_a_replay_emits_nothing() -> None:
    asked: list[str] = []
    deltas: list[Delta] = []
    result, history = _record(agents_app(asked), "run_streamed", deltas)
    assert result == {"output": "".join(ANSWER), "items": True}
    assert asked == ["stream_response", "stream_response"]  # the model streamed, inside its calls
    tools = [d for d in deltas if d.kind == "tool_args"]
    assert tools[0].name == "lookup" and {d.index for d in tools} == {0}
    assert json.loads("".join(d.text for d in tools)) == {"order": "A-1"}
    text = [d.text for d in deltas if d.kind == "text"]
    assert text == ["".join(ANSWER)]  # the scripted model streams its text in one delta
    assert [e.model for e in history if isinstance(e, ModelCallScheduled)] == ["support.model"] * 2
    fresh_asked: list[str] = []
    assert _replay_emits_nothing(agents_app(fresh_asked), history) == result
    assert fresh_asked == []


def test_an_agents_sdk_streamed_call_records_what_the_unstreamed_one_does() -> None:
    """``run`` and ``run_streamed`` of the same agent record the same model calls: the same
    recorded responses, usage included."""
    _, streamed = _record(agents_app([]), "run_streamed", [])
    _, unstreamed = _record(agents_app([]), "run", [])
    recorded = [
        [(e.result, e.input_tokens, e.output_tokens) for e in history if isinstance(e, ModelCallCompleted)]
        for history in (streamed, unstreamed)
    ]
    assert len(recorded[0]) == 2 and recorded[0] == recorded[1]
