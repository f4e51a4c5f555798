"""What a run does as it happens, as its watchers read it: one ``StreamEvent`` per step, delta or ending.

The stream topic (``Settings.stream_topic``) is a view beside the truth: workers publish to it only
while they execute a run live (runtime.worker.streaming), a reader joins the run's recorded history
to its tail (runtime.client.streaming). The events a record stands for -- a call scheduled, its
outcome, a timer, a signal, the run's end -- are made by one function, ``from_record``, for both:
the worker publishes them as it appends the record, the reader rebuilds them from the history it
reads, so the two compare by ``identity`` at the seam.

Encoded as compact JSON, not Avro: a record lives an hour, nothing in the log's history refers to
it, and a model answer is hundreds of them (the limits topic's reasoning: coordination, not history).
A reader skips a value it cannot parse. Kinds:

- ``started``: a call was scheduled (``data``: ``call`` model|tool, ``name``)
- ``attempt``: an attempt of a call starts on a worker (live only; ``attempt``, ``data.worker``)
- ``delta``: a piece of a model call's answer as it forms (``data``: ``kind`` text|tool_args|thinking,
  ``text``, ``index``, ``name``)
- ``superseded``: the deltas of an earlier attempt of the call at ``position`` are void (its
  retry, or its re-run after a crash, starts now): readers drop what they showed of it
- ``completed`` / ``failed``: a call's outcome (``data``: ``result`` as JSON text, or
  ``error_type``, ``error``, ``final``)
- ``waiting``: the run waits (``data``: ``for`` timer|signal|permit, ``name``, ``until`` ms or None);
  a signal wait with no timeout has no record: the worker publishes its event alone
  (runtime.worker.streaming), and a reader's history never holds it
- ``signal``: a signal reached the run (``data``: ``name``, ``offset``: its command offset)
- ``ended``: the run ended (``data``: ``status``, ``result`` or ``error``)

With ``seal_contents`` the stream carries no contents (it is a second copy, kept an hour, which the
erasure of a run's key would not reach): no deltas, and ``result`` / ``error`` left out (None). The
events that would have carried them say so with ``data.sealed = true`` -- each ``attempt`` (its
answer is not streamed), ``completed``, ``failed``, ``ended`` -- so a watcher is told, not left
wondering; the run's history, read with its key, holds them.
- ``gap``: made by a reader, never published: retention dropped records it had not read
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from runtime.errors import AgentlogError
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    PermitAwaited,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunRejected,
    SignalReceived,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.log.records.responses import full_text

StreamKind = Literal[
    "started", "attempt", "delta", "superseded", "completed", "failed", "waiting", "signal", "ended", "gap"
]
KINDS: frozenset[str] = frozenset(StreamKind.__args__)  # type: ignore[attr-defined]

# The kinds a record stands for: a reader's history holds them, so the seam compares them by identity.
RECORDED: frozenset[str] = frozenset({"started", "completed", "failed", "waiting", "signal", "ended"})
# The kinds only live execution makes: they belong to an attempt, void once it is superseded.
ATTEMPT_KINDS: frozenset[str] = frozenset({"attempt", "delta", "completed", "failed"})


class StreamFormatError(AgentlogError, ValueError):
    """A stream value that is not a stream event (another version's, or not agentlog's)."""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    run_id: str
    kind: StreamKind
    position: int = -1  # the call's (or timer's) position in the run; -1 for the run itself
    attempt: int = 0  # the call's attempt (1 on); 0 where none applies
    data: dict[str, Any] = field(default_factory=dict)
    at: int = 0  # ms since the epoch it happened (the record's occurred_at, or the worker's clock)
    epoch: int = -1  # the publishing worker's epoch on the run's partition (-1: from history)

    @property
    def live(self) -> bool:
        """Whether a worker published it (else a reader made it from a record of the history)."""
        return self.epoch >= 0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "position": self.position,
            "attempt": self.attempt,
            "data": self.data,
            "at": self.at,
            "live": self.live,
        }


def identity(event: StreamEvent) -> tuple[Any, ...]:
    """What two events for the same record share: the history's copy and the stream's compare equal."""
    if event.kind == "signal":
        return ("signal", event.data.get("offset"))
    if event.kind == "ended":
        return ("ended",)
    return (event.kind, event.position, event.attempt)


def encode(event: StreamEvent) -> bytes:
    return encode_parts(
        event.run_id, event.kind, event.position, event.attempt, event.data, event.at, event.epoch
    )


def encode_parts(
    run_id: str, kind: StreamKind, position: int, attempt: int, data: dict[str, Any], at: int, epoch: int
) -> bytes:
    """``encode`` of the event these fields make, without making it (a worker publishes ~4 a step)."""
    return orjson.dumps({"r": run_id, "k": kind, "p": position, "a": attempt, "d": data, "t": at, "e": epoch})


def decode(value: bytes) -> StreamEvent:
    """A stream value back as an event; StreamFormatError for what is not one."""
    try:
        raw = orjson.loads(value)
        kind = raw["k"]
        if kind not in KINDS:
            raise StreamFormatError(f"unknown stream event kind {kind!r}")
        return StreamEvent(
            run_id=str(raw["r"]),
            kind=kind,
            position=int(raw["p"]),
            attempt=int(raw["a"]),
            data=dict(raw["d"]),
            at=int(raw["t"]),
            epoch=int(raw["e"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise StreamFormatError(f"not a stream event: {error}") from error


_ENDINGS: dict[type[Event], str] = {
    RunCompleted: "completed",
    RunFailed: "failed",
    RunCancelled: "cancelled",
    RunParked: "parked",
    RunContinuedAsNew: "continued_as_new",
    RunRejected: "rejected",
}

# What a stream event is made of, but its epoch: run id, kind, position, attempt, data, at.
Parts = tuple[str, StreamKind, int, int, dict[str, Any], int]


def from_record(event: Event, *, contents: bool = True, epoch: int = -1) -> StreamEvent | None:
    """The stream event a record of the run's history stands for, or None (most records are the
    run's bookkeeping). ``contents=False`` leaves results and errors out (sealed runs' contents
    are not published in the clear). ``epoch``: the publishing worker's (-1: read from history)."""
    made = parts_of(event, contents)
    return None if made is None else StreamEvent(*made, epoch)


def parts_of(event: Event, contents: bool = True) -> Parts | None:
    """``from_record``'s event as its fields (a worker encodes them at once: ``encode_parts``)."""
    make = _MAKERS.get(type(event))
    return None if make is None else make(event, contents)


def _scheduled_model(event: ModelCallScheduled, contents: bool) -> Parts:
    return (
        event.run_id,
        "started",
        event.position,
        0,
        {"call": "model", "name": event.model},
        event.occurred_at,
    )


def _scheduled_tool(event: ToolCallScheduled, contents: bool) -> Parts:
    return (
        event.run_id,
        "started",
        event.position,
        0,
        {"call": "tool", "name": event.tool},
        event.occurred_at,
    )


def _completed(event: ModelCallCompleted | ToolCallCompleted, contents: bool) -> Parts:
    shown: str | None = None
    if contents and event.result_offset is None:
        shown = full_text(event) if isinstance(event, ModelCallCompleted) else event.result
    data = _sealed({"result": shown}, contents)
    return (event.run_id, "completed", event.position, event.attempt, data, event.occurred_at)


def _failed(event: ModelCallFailed | ToolCallFailed, contents: bool) -> Parts:
    data = {"error_type": event.error_type, "error": event.error if contents else None, "final": event.final}
    return (event.run_id, "failed", event.position, event.attempt, _sealed(data, contents), event.occurred_at)


def _timer(event: TimerScheduled, contents: bool) -> Parts:
    waits = "signal" if event.name.startswith("signal:") else "timer"
    data = {"for": waits, "name": event.name.removeprefix("signal:"), "until": event.fire_at}
    return (event.run_id, "waiting", event.position, 0, data, event.occurred_at)


def _permit(event: PermitAwaited, contents: bool) -> Parts:
    data = {"for": "permit", "name": event.limit, "until": None}
    return (event.run_id, "waiting", event.position, event.attempt, data, event.occurred_at)


def _signal(event: SignalReceived, contents: bool) -> Parts:
    data = {"name": event.name, "offset": event.command_offset}
    return (event.run_id, "signal", -1, 0, data, event.occurred_at)


def _ended(event: Event, contents: bool) -> Parts:
    data: dict[str, Any] = {"status": _ENDINGS[type(event)]}
    if isinstance(event, RunCompleted):
        data["result"] = event.result if contents else None
    elif isinstance(event, RunFailed):
        data["error"] = f"{event.error_type}: {event.error}" if contents else event.error_type
    elif isinstance(event, RunCancelled | RunParked | RunRejected):
        data["error"] = event.reason
    elif isinstance(event, RunContinuedAsNew):
        data["next_run"] = event.new_run_id
    if isinstance(event, RunCompleted | RunFailed):
        data = _sealed(data, contents)
    return (event.run_id, "ended", -1, 0, data, event.occurred_at)


# By the record's exact type (no record type is subclassed): one lookup, where most records --
# the run's bookkeeping -- stand for no stream event.
_MAKERS: dict[type[Event], Callable[[Any, bool], Parts]] = {
    ModelCallScheduled: _scheduled_model,
    ToolCallScheduled: _scheduled_tool,
    ModelCallCompleted: _completed,
    ToolCallCompleted: _completed,
    ModelCallFailed: _failed,
    ToolCallFailed: _failed,
    TimerScheduled: _timer,
    PermitAwaited: _permit,
    SignalReceived: _signal,
    **dict.fromkeys(_ENDINGS, _ended),
}


def _sealed(data: dict[str, Any], contents: bool) -> dict[str, Any]:
    """``data`` marked as having its contents left out (``seal_contents``), when they are."""
    if not contents:
        data["sealed"] = True
    return data
