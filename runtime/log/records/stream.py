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
    return orjson.dumps(
        {
            "r": event.run_id,
            "k": event.kind,
            "p": event.position,
            "a": event.attempt,
            "d": event.data,
            "t": event.at,
            "e": event.epoch,
        }
    )


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


def from_record(event: Event, *, contents: bool = True, epoch: int = -1) -> StreamEvent | None:
    """The stream event a record of the run's history stands for, or None (most records are the
    run's bookkeeping). ``contents=False`` leaves results and errors out (sealed runs' contents
    are not published in the clear). ``epoch``: the publishing worker's (-1: read from history)."""
    run, at, kind = event.run_id, event.occurred_at, type(event)
    data: dict[str, Any]
    if isinstance(event, ModelCallScheduled):
        return StreamEvent(
            run, "started", event.position, 0, {"call": "model", "name": event.model}, at, epoch
        )
    if isinstance(event, ToolCallScheduled):
        return StreamEvent(run, "started", event.position, 0, {"call": "tool", "name": event.tool}, at, epoch)
    if isinstance(event, ModelCallCompleted | ToolCallCompleted):
        shown = full_text(event) if isinstance(event, ModelCallCompleted) else event.result
        data = {"result": shown if contents and event.result_offset is None else None}
        return StreamEvent(
            run, "completed", event.position, event.attempt, _sealed(data, contents), at, epoch
        )
    if isinstance(event, ModelCallFailed | ToolCallFailed):
        data = {
            "error_type": event.error_type,
            "error": event.error if contents else None,
            "final": event.final,
        }
        return StreamEvent(run, "failed", event.position, event.attempt, _sealed(data, contents), at, epoch)
    if isinstance(event, TimerScheduled):
        waits = "signal" if event.name.startswith("signal:") else "timer"
        name = event.name.removeprefix("signal:")
        return StreamEvent(
            run, "waiting", event.position, 0, {"for": waits, "name": name, "until": event.fire_at}, at, epoch
        )
    if isinstance(event, PermitAwaited):
        data = {"for": "permit", "name": event.limit, "until": None}
        return StreamEvent(run, "waiting", event.position, event.attempt, data, at, epoch)
    if isinstance(event, SignalReceived):
        return StreamEvent(
            run, "signal", -1, 0, {"name": event.name, "offset": event.command_offset}, at, epoch
        )
    ending = _ENDINGS.get(kind)
    if ending is not None:
        data = {"status": ending}
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
        return StreamEvent(run, "ended", -1, 0, data, at, epoch)
    return None


def _sealed(data: dict[str, Any], contents: bool) -> dict[str, Any]:
    """``data`` marked as having its contents left out (``seal_contents``), when they are."""
    if not contents:
        data["sealed"] = True
    return data
