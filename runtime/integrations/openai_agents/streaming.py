"""A streamed model call of the Agents SDK (``Model.stream_response``, what ``Runner.run_streamed``
asks for), recorded as one agentlog call like an unstreamed one.

Inside the call (the worker, live) the answering model streams: its Responses events become
deltas (``runtime.models.deltas``) -- output text, reasoning text, a function call's name and its
arguments as they form -- and the ``response.completed`` event's response is what gets recorded,
in the shape ``get_response`` records. On the workflow side the SDK gets the recorded response
back as one ``response.completed`` event, live and on a replay alike, so its run goes the same way
both times; a replay runs no call, so emits nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from agents import ModelResponse, Usage
from agents.items import TResponseStreamEvent
from agents.usage import _attach_normalized_usage, _response_usage_to_usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from runtime.models.deltas import Delta, emit
from runtime.models.errors import ModelUnreachable


class _Emitter:
    def __init__(self) -> None:
        self._calls: dict[int, int] = {}  # output index -> the function call's index among the calls

    def event(self, event: TResponseStreamEvent) -> None:
        if isinstance(event, ResponseTextDeltaEvent) and event.delta:
            emit(Delta("text", event.delta))
        elif isinstance(event, ResponseReasoningTextDeltaEvent | ResponseReasoningSummaryTextDeltaEvent):
            if event.delta:
                emit(Delta("thinking", event.delta))
        elif isinstance(event, ResponseOutputItemAddedEvent) and isinstance(
            event.item, ResponseFunctionToolCall
        ):
            index = self._calls.setdefault(event.output_index, len(self._calls))
            emit(Delta("tool_args", event.item.arguments, index=index, name=event.item.name))
        elif isinstance(event, ResponseFunctionCallArgumentsDeltaEvent) and event.delta:
            index = self._calls.setdefault(event.output_index, len(self._calls))
            emit(Delta("tool_args", event.delta, index=index))


async def streamed_response(events: AsyncIterator[TResponseStreamEvent], where: str) -> ModelResponse:
    """Read a model's stream to its end, emitting its deltas; the ``ModelResponse`` the SDK's
    streamed run would make of it (as ``agents.run_internal.run_loop`` does)."""
    emitter = _Emitter()
    final: Response | None = None
    async for event in events:
        emitter.event(event)
        if isinstance(event, ResponseCompletedEvent):
            final = event.response
    if final is None:
        # Cut, failed or incomplete: no answer to record; another attempt may give one.
        raise ModelUnreachable(f"{where}: the model's stream ended without response.completed")
    usage = _response_usage_to_usage(final.usage) if final.usage else Usage()
    return ModelResponse(output=final.output, usage=usage, response_id=final.id)


def completed_event(response: ModelResponse) -> ResponseCompletedEvent:
    """The recorded ``response`` as the ``response.completed`` event the SDK's streamed run reads
    (its usage the recorded one exactly, attached as the SDK's own test models attach it)."""
    usage = response.usage
    response_usage = ResponseUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=InputTokensDetails.model_validate(
            {
                "cached_tokens": usage.input_tokens_details.cached_tokens,
                "cache_write_tokens": getattr(usage.input_tokens_details, "cache_write_tokens", 0),
            }
        ),
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=usage.output_tokens_details.reasoning_tokens
        ),
    )
    _attach_normalized_usage(response_usage, usage)
    answer = Response(
        id=response.response_id or "",
        created_at=0,
        model="agentlog-recorded",
        object="response",
        output=list(response.output),
        tool_choice="none",
        tools=[],
        top_p=None,
        parallel_tool_calls=False,
        status="completed",
        usage=response_usage,
    )
    if response.response_id is None:
        object.__setattr__(answer, "id", None)  # as recorded: the SDK reads a missing id as None
    return ResponseCompletedEvent(type="response.completed", response=answer, sequence_number=0)
