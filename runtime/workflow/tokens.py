"""How many tokens a model call will use, before it is made: for limits and budgets that must
decide before the provider reports its usage. A deliberate over-estimate from the size of the
prompt (about four characters a token in the common tokenizers) plus the completion the call asks
for at most; what the provider reports afterwards is what is recorded and charged."""

from __future__ import annotations

from typing import Any

import orjson

CHARS_PER_TOKEN = 4
# Completion parameters the providers take, in the order they are looked for.
_COMPLETION_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def estimate_tokens(messages: Any, params: dict[str, Any]) -> int:
    """The prompt's size as JSON over ``CHARS_PER_TOKEN``, rounded up, plus the call's completion cap
    (0 when it sets none). Bytes, not characters: cheaper to count, and never fewer."""
    return estimate_from_size(len(orjson.dumps(messages)), params)


def estimate_from_size(size: int, params: dict[str, Any]) -> int:
    """``estimate_tokens`` of a prompt whose JSON is ``size`` long (``Intent.size``: measured where
    the call's arguments were hashed, so a call under a tokens limit is not serialized again)."""
    prompt = -(-size // CHARS_PER_TOKEN)
    if params:
        for name in _COMPLETION_CAPS:
            cap = params.get(name)
            if isinstance(cap, int):
                return prompt + max(0, cap)
    return prompt
