"""An answer of the tests' model endpoint (``support.model_endpoint``) cut into the events a
provider streams it as: OpenAI's chat completion chunks, Anthropic's message events. Text goes in
pieces of a word each; a tool call's arguments in pieces of eight characters."""

from __future__ import annotations

import json
import re
from typing import Any

_ARGS_PIECE = 8


def words(text: str) -> list[str]:
    """``text`` in pieces of a word each (with the spaces after it): what a streamed answer sends."""
    return re.findall(r"\s*\S+\s*", text) or [text]


def _pieces(text: str) -> list[str]:
    return [text[i : i + _ARGS_PIECE] for i in range(0, len(text), _ARGS_PIECE)] or [""]


def chat_chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A ``chat.completion`` as the ``chat.completion.chunk``s OpenAI streams it as."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    content = message.get("content")
    chunks = [chunk({"role": "assistant", "content": "" if content is not None else None})]
    chunks += [chunk({"content": piece}) for piece in words(content)] if content else []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        start = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            chunk({"tool_calls": [start | {"function": {"name": function["name"], "arguments": ""}}]})
        )
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(function["arguments"])
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage and completion.get("usage") is not None:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def anthropic_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A Messages API answer as the events Anthropic streams it as: the input usage in
    ``message_start``, the output tokens in ``message_delta``."""
    usage = message["usage"]
    started = message | {
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": started})
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in words(block["text"])]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in _pieces(json.dumps(block["input"]))
            ]
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message.get("stop_sequence")}
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}},
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
