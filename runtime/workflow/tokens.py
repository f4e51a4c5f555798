"""How many tokens a model call will use, before it is made: for limits and budgets that must
decide before the provider reports its usage. A deliberate over-estimate from the size of the
prompt (about four characters a token in the common tokenizers) plus the completion the call asks
for at most; what the provider reports afterwards is what is recorded and charged."""

from __future__ import annotations

from typing import Any

from runtime.workflow.canonical import canonical_json

CHARS_PER_TOKEN = 4
# Completion parameters the providers take, in the order they are looked for.
_COMPLETION_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def estimate_tokens(messages: Any, params: dict[str, Any]) -> int:
    """The prompt's characters over ``CHARS_PER_TOKEN``, rounded up, plus the call's completion cap
    (0 when it sets none)."""
    prompt = -(-len(canonical_json(messages)) // CHARS_PER_TOKEN)
    cap = next((params[name] for name in _COMPLETION_CAPS if isinstance(params.get(name), int)), 0)
    return prompt + max(0, cap)
