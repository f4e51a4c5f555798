"""A PydanticAI model stream as agentlog deltas (``runtime.models.deltas``).

A model request that streams (``run_stream``, ``iter`` with ``node.stream``, an
``event_stream_handler``) runs inside its agentlog call, where the worker's sink is: this turns its
``PartStartEvent``s and ``PartDeltaEvent``s into text, thinking and tool-argument deltas as they
come, and hands the events on to the agent's own handler unchanged. The call still records the
final ``ModelResponse``; a replay serves it without running the call, so emits nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.tools import RunContext
from pydantic_core import to_jsonable_python

from runtime.models.deltas import Delta, emit


def _args_text(args: object) -> str:
    """A tool call's arguments as the JSON text a provider streams (some models give them parsed)."""
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(to_jsonable_python(args))


class _Emitter:
    """The deltas of one model response's events (a tool call's index: its rank among the calls)."""

    def __init__(self) -> None:
        self._tool_index: dict[int, int] = {}  # part index -> tool call index

    def event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart) and part.content:
                emit(Delta("text", part.content))
            elif isinstance(part, ThinkingPart) and part.content:
                emit(Delta("thinking", part.content))
            elif isinstance(part, ToolCallPart):
                index = self._tool_index.setdefault(event.index, len(self._tool_index))
                emit(Delta("tool_args", _args_text(part.args), index=index, name=part.tool_name))
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and delta.content_delta:
                emit(Delta("text", delta.content_delta))
            elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
                emit(Delta("thinking", delta.content_delta))
            elif isinstance(delta, ToolCallPartDelta):
                text = _args_text(delta.args_delta)
                if text:
                    index = self._tool_index.setdefault(event.index, len(self._tool_index))
                    emit(Delta("tool_args", text, index=index))


def emitting(handler: EventStreamHandler[Any] | None) -> EventStreamHandler[Any]:
    """A handler that emits the stream's deltas and hands its events to ``handler`` (if any)."""

    async def handle(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        emitter = _Emitter()

        async def passed_on() -> AsyncIterator[AgentStreamEvent]:
            async for event in events:
                emitter.event(event)
                yield event

        stream = passed_on()
        if handler is not None:
            await handler(ctx, stream)
        async for _ in stream:  # what the handler left: emitted all the same
            pass

    return handle
