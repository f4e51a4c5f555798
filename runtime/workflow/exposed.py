"""State a run exposes to queries (``ctx.expose(name, value)``), read with ``Client.query``.

Workflow code exposes named values as it goes: each is kept as canonical JSON, the latest per name.
Deterministic like the rest of the run -- a replay exposes the same values at the same points -- so
exposure is not recorded: it is a view. The worker publishes a run's exposed state to the compacted
exposed topic (runtime.worker.streaming) after an activation in which the code exposed something
live; what a replay exposes again was published when the code first ran, and is not published again.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import AgentlogError
from runtime.workflow.canonical import canonical_json

# Exposed state is published whole on each change: progress and small summaries, not data.
MAX_EXPOSED_BYTES = 64 * 1024


class Exposed:
    """A run's exposed values (name -> canonical JSON); ``changed`` until the worker takes them."""

    __slots__ = ("changed", "values")

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.changed = False

    def set(self, name: str, value: Any, *, live: bool = True) -> None:
        """``live=False`` in a replay: the value was published when the code first ran, so it is
        kept without being published again."""
        if not isinstance(name, str) or not name:
            raise AgentlogError(f"ctx.expose needs a non-empty name, got {name!r}")
        text = canonical_json(value)  # TypeError for what is not JSON-able
        if len(text) > MAX_EXPOSED_BYTES:
            raise AgentlogError(
                f"ctx.expose({name!r}, ...): {len(text)} bytes of JSON, over {MAX_EXPOSED_BYTES}: expose "
                "progress or a summary, not data"
            )
        if self.values.get(name) != text:
            self.values[name] = text
            self.changed = self.changed or live

    def take(self) -> dict[str, str] | None:
        """The values if they changed since the last take (a copy), else None."""
        if not self.changed:
            return None
        self.changed = False
        return dict(self.values)
