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
from dataclasses import dataclass
from typing import Any

from runtime.errors import TerminalError
from runtime.log.records.events import (
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
from runtime.log.schemas.datum import field_names

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
# The new run's writer sets them.
_RESTAMPED = {"run_id", "seq", "worker", "epoch", "schema_version", "chain", "signature"}


class SeedError(TerminalError, ValueError):
    """A reset's copied events cannot be used; the message says which and why."""


@dataclass(frozen=True)
class OpenCall:
    """A model or tool call whose Scheduled record a cut keeps and whose outcome it does not."""

    kind: str  # model | tool
    name: str
    position: int

    def describe(self) -> str:
        return f"{self.kind} {self.name!r} at position {self.position}"


class UncleanSeam(SeedError):
    """A cut between a call's Scheduled record and its outcome: the new run would run it again
    in doubt. The message names the position, the open calls and the nearest clean seams."""

    def __init__(
        self, position: int, open_calls: list[OpenCall], below: int | None, above: int | None
    ) -> None:
        seams = " or ".join(f"--to {seam}" for seam in (below, above) if seam is not None) or "none"
        super().__init__(
            f"position {position} is not a clean seam: it cuts between the Scheduled record and the "
            f"outcome of {', '.join(call.describe() for call in open_calls)}, which the new run would "
            f"execute again, in doubt. Nearest clean seams: {seams}; or pass --allow-in-doubt "
            "(RunHandle.reset(..., allow_in_doubt=True)) to reset there anyway"
        )
        self.position, self.open_calls, self.below, self.above = position, open_calls, below, above


def cut(history: list[Event], position: int, *, allow_in_doubt: bool = False) -> list[Event]:
    """The events to copy: those in log order before the first one at ``position`` or later.
    A cut that keeps a call's Scheduled record without its outcome (logged after the cut, or
    never) is refused with ``UncleanSeam``; with ``allow_in_doubt`` the call is copied without
    its outcome, so the new run re-executes it (in doubt, with its recorded key)."""
    if position < 1:
        raise SeedError(f"reset position must be 1 or more, not {position}")
    kept = _kept(history, position)
    if not allow_in_doubt:
        open_calls = open_calls_in(kept)
        if open_calls:
            below, above = nearest_clean_seams(history, position)
            raise UncleanSeam(position, open_calls, below, above)
    return kept


def _kept(history: list[Event], position: int) -> list[Event]:
    kept: list[Event] = []
    for event in history:
        at = getattr(event, "position", None)
        if isinstance(at, int) and at >= position:
            break
        if type(event).__name__ in COPIED:
            kept.append(event)
    return kept


def open_calls_in(kept: list[Event]) -> list[OpenCall]:
    """The model and tool calls scheduled in ``kept`` without a final outcome in it."""
    open_calls: dict[int, OpenCall] = {}
    for event in kept:
        if isinstance(event, ModelCallScheduled):
            open_calls[event.position] = OpenCall("model", event.model, event.position)
        elif isinstance(event, ToolCallScheduled):
            open_calls[event.position] = OpenCall("tool", event.tool, event.position)
        elif isinstance(event, (ModelCallCompleted, ToolCallCompleted)) or (
            isinstance(event, (ModelCallFailed, ToolCallFailed)) and event.final
        ):
            open_calls.pop(event.position, None)
    return [open_calls[p] for p in sorted(open_calls)]


def clean_seams(history: list[Event]) -> list[int]:
    """Every position a reset may cut at without leaving a call in doubt (1 .. last position + 1)."""
    positions = [at for e in history if isinstance(at := getattr(e, "position", None), int)]
    last = max(positions, default=0)
    return [p for p in range(1, last + 2) if not open_calls_in(_kept(history, p))]


def nearest_clean_seams(history: list[Event], position: int) -> tuple[int | None, int | None]:
    """The closest clean seam below ``position`` and the closest above it (None where none is)."""
    seams = clean_seams(history)
    below = max((s for s in seams if s < position), default=None)
    above = min((s for s in seams if s > position), default=None)
    return below, above


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
