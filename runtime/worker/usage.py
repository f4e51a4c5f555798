"""Token usage and the answering model, read from what a model client returned.

Model clients return JSON (``runtime.models.openai`` returns the provider's ``usage`` and
``model``); the worker copies them into ``ModelCallCompleted`` so cost is a column, not a parse
of every result. Both the OpenAI chat shape (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``) and the responses/Anthropic shape (``input_tokens``,
``output_tokens``, ``cache_read_input_tokens`` / ``input_tokens_details.cached_tokens``) are read.
A result without usage records none (null), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    response_model: str | None = None


NO_USAGE = Usage()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _first(*values: Any) -> int | None:
    for value in values:
        count = _count(value)
        if count is not None:
            return count
    return None


def usage_of(result: Any) -> Usage:
    """The usage a model result reports (NO_USAGE when it reports none)."""
    if not isinstance(result, dict):
        return NO_USAGE
    # A framework integration's result carries its usage beside the recorded JSON
    # (runtime.integrations.calls.ModelResult), not in it.
    # (A plain dict -- most results -- has no such attribute: getattr would raise and catch.)
    beside = None if type(result) is dict else getattr(result, "agentlog_usage", None)
    if isinstance(beside, dict):
        result = beside
    model = result.get("model")
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return Usage(response_model=model) if isinstance(model, str) and model else NO_USAGE
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    return Usage(
        input_tokens=_first(usage.get("prompt_tokens"), usage.get("input_tokens")),
        output_tokens=_first(usage.get("completion_tokens"), usage.get("output_tokens")),
        cached_tokens=_first(
            details.get("cached_tokens") if isinstance(details, dict) else None,
            usage.get("cached_tokens"),
            usage.get("cache_read_input_tokens"),
        ),
        response_model=model if isinstance(model, str) and model else None,
    )
