"""A streamed Messages API answer (``messages.stream``) read event by event: each piece of text,
of thinking or of a tool call's input (``input_json_delta``) is emitted as a delta
(``runtime.models.deltas``) as it arrives. The SDK puts the final ``Message`` together, usage
included (the input tokens from ``message_start``, the output tokens from the last
``message_delta``), and ``runtime.models.anthropic`` reads it as it reads an unstreamed answer,
so both record the same JSON. A stream that ends before the answer's stop reason was cut: worth
another attempt (``ModelUnreachable``).
"""

from __future__ import annotations

from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import Message

from runtime.models.deltas import Delta, emit
from runtime.models.errors import ModelUnreachable


async def read(stream: AsyncMessageStream, where: str) -> Message:
    """Read ``stream`` to its end, emitting its deltas as they come; the final message."""
    tool_index: dict[int, int] = {}  # content block -> the tool call's index among the answer's calls
    async for event in stream:
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            tool_index[event.index] = len(tool_index)
            emit(Delta("tool_args", "", index=tool_index[event.index], name=event.content_block.name))
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                emit(Delta("text", delta.text))
            elif delta.type == "thinking_delta" and delta.thinking:
                emit(Delta("thinking", delta.thinking))
            elif delta.type == "input_json_delta" and delta.partial_json:
                emit(Delta("tool_args", delta.partial_json, index=tool_index.get(event.index, 0)))
    final = await stream.get_final_message()
    if final.stop_reason is None:
        raise ModelUnreachable(f"{where}: the stream ended before the answer did (no stop reason)")
    return final
