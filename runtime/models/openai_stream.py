"""A streamed chat completion (``stream=True``) read chunk by chunk: each piece of text or of a
tool call's arguments is emitted as a delta (``runtime.models.deltas``) as it arrives, and the
pieces are put back together into the ``ChatCompletionMessage`` the unstreamed call would have
returned, so both record the same JSON (``runtime.models.openai``).

Usage comes from the last chunk (``stream_options={"include_usage": True}``; servers that ignore
the option send none, as an unstreamed answer without ``usage`` would). A stream that ends
before any choice said why it finished was cut: the answer is incomplete, and worth another
attempt (``ModelUnreachable``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage

from runtime.models.deltas import Delta, emit
from runtime.models.errors import ModelUnreachable


@dataclass
class _ToolCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamedCompletion:
    """What the chunks said, once read (``read``)."""

    message: ChatCompletionMessage
    finish_reason: str
    model: str | None
    usage: dict[str, Any]


async def read(chunks: AsyncIterator[ChatCompletionChunk], where: str) -> StreamedCompletion:
    """Read the stream of the first choice to its end, emitting its deltas as they come."""
    content: list[str] | None = None
    calls: dict[int, _ToolCall] = {}
    finish_reason: str | None = None
    model: str | None = None
    usage: dict[str, Any] = {}
    async for chunk in chunks:
        model = chunk.model or model
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(mode="json", exclude_none=True)
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # n > 1: the first choice is the answer, as unstreamed
            delta = choice.delta
            thinking = (delta.model_extra or {}).get("reasoning_content")  # vLLM's, DeepSeek's
            if isinstance(thinking, str) and thinking:
                emit(Delta("thinking", thinking))
            if delta.content is not None:
                content = [*(content or []), delta.content]
                if delta.content:
                    emit(Delta("text", delta.content))
            for piece in delta.tool_calls or []:
                call = calls.setdefault(piece.index, _ToolCall())
                first = not call.arguments and not call.name
                function = piece.function
                call.id = piece.id or call.id
                call.name += (function.name or "") if function else ""
                arguments = (function.arguments or "") if function else ""
                call.arguments.append(arguments)
                if arguments or first:  # the first piece names the tool, even without arguments
                    emit(Delta("tool_args", arguments, index=piece.index, name=call.name or None))
            if choice.finish_reason is not None:
                finish_reason = choice.finish_reason
    if finish_reason is None:
        raise ModelUnreachable(f"{where}: the stream ended before the answer did (no finish reason)")
    tool_calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": "".join(call.arguments)},
        }
        for _, call in sorted(calls.items())
    ]
    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None if content is None else "".join(content),
            **({"tool_calls": tool_calls} if tool_calls else {}),
        }
    )
    return StreamedCompletion(message, finish_reason, model, usage)
