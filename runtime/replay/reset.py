"""Reset: a new run that starts from another run's recorded history before a position.

An operator's tool for a parked run (code changed under it, a re-decided plan out of bounds, the
history limit) or a run to take again from a step: the events before ``position`` are copied
into a new run, which replays them -- no model or tool call before the cut runs again -- and
executes live from there with the current code (Temporal's reset, DBOS's fork). The new run
derives its idempotency keys from the original run, so an effect it repeats (same tool, same
key arguments, same count) reaches its service with the key it had the first time.

The copied events travel inside the submission (``RunSubmitted.seed``): the worker that starts
the new run reads nothing outside its own partition.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import TerminalError
from runtime.log.events import (
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    PatchRecorded,
    Redecided,
    SignalReceived,
    TimerFired,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.log.serde import field_names

# What a reset copies: the run's recorded commands, their outcomes, the signals it received.
COPIED: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        ModelCallScheduled,
        ModelCallCompleted,
        ModelCallFailed,
        ToolCallScheduled,
        ToolCallCompleted,
        ToolCallFailed,
        TimerScheduled,
        TimerFired,
        SignalReceived,
        PatchRecorded,
        Redecided,
    )
}
_RESTAMPED = {"run_id", "seq", "worker", "epoch", "schema_version"}  # the new run's writer sets them


class SeedError(TerminalError, ValueError):
    """A reset's copied events cannot be used; the message says which and why."""


def cut(history: list[Event], position: int) -> list[Event]:
    """The events to copy: those in log order before the first one at ``position`` or later.
    A call before the cut whose outcome was logged after it is copied without its outcome, so
    the new run re-executes it (in doubt, with its recorded key)."""
    if position < 1:
        raise SeedError(f"reset position must be 1 or more, not {position}")
    kept: list[Event] = []
    for event in history:
        at = getattr(event, "position", None)
        if isinstance(at, int) and at >= position:
            break
        if type(event).__name__ in COPIED:
            kept.append(event)
    return kept


def encode_seed(events: list[Event]) -> str:
    return json.dumps(
        [
            {"type": e.type, **{n: getattr(e, n) for n in field_names(type(e)) if n not in _RESTAMPED}}
            for e in events
        ],
        separators=(",", ":"),
    )


def decode_seed(text: str, position: int) -> list[Event]:
    """The copied events, checked: known types only, every position before ``position``."""
    try:
        items: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise SeedError(f"reset seed is not JSON: {error}") from error
    if not isinstance(items, list):
        raise SeedError("reset seed must be a JSON array of events")
    events: list[Event] = []
    for i, item in enumerate(items):
        cls = COPIED.get(item.get("type", "")) if isinstance(item, dict) else None
        if cls is None:
            raise SeedError(f"reset seed item {i} is not a copyable event: {str(item)[:200]}")
        fields = {k: v for k, v in item.items() if k != "type" and k not in _RESTAMPED}
        try:
            event = cls(run_id="", **fields)
        except TypeError as error:
            raise SeedError(f"reset seed item {i} ({cls.__name__}): {error}") from error
        at = getattr(event, "position", None)
        if isinstance(at, int) and at >= position:
            raise SeedError(f"reset seed item {i} is at position {at}, not before {position}")
        events.append(event)
    return events
