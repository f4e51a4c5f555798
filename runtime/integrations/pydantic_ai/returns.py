"""A PydanticAI tool call's outcome recorded without the wrapper keys every plain return carries.

PydanticAI's durable layer journals a tool's return as
``{"content_file_digests": [], "kind": "tool_return", "result": <the tool's value>}`` (without the
digests for a scalar): ~50 bytes a tool call that say nothing (no content files, the ordinary
kind). Such an outcome is recorded as
``{"result": <the tool's value>}`` and read back whole. Every form PydanticAI journals carries a
``kind`` (its discriminator), so an outcome without one can only be this compact form: outcomes
recorded before (with the keys) and every other kind (``ModelRetry``, ``CallDeferred``, a return
with content files) are recorded and read as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

_RESULT = "result"
_DIGESTS = "content_file_digests"


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _wrapped(result: Any) -> dict[str, Any]:
    # PydanticAI records the content files' digests of a result that is not a scalar, [] when none:
    # a missing list would read as a return saved before it kept them (pydantic_ai.messages).
    if _scalar(result):
        return {"kind": "tool_return", _RESULT: result}
    return {_DIGESTS: [], "kind": "tool_return", _RESULT: result}


def compact_outcome(outcome: Any) -> Any:
    """``outcome`` (the codec's JSON of a tool call's result) as recorded."""
    if isinstance(outcome, dict) and _RESULT in outcome and outcome == _wrapped(outcome[_RESULT]):
        return {_RESULT: outcome[_RESULT]}
    return outcome


def full_outcome(recorded: Any) -> Any:
    """A recorded outcome as the codec reads it (the keys put back on a compact one)."""
    if isinstance(recorded, dict) and len(recorded) == 1 and _RESULT in recorded:
        return _wrapped(recorded[_RESULT])
    return recorded


def compacting(body: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    """``body`` whose outcome is recorded compact (what the worker runs)."""

    async def run() -> object:
        return compact_outcome(await body())

    return run
