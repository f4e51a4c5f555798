"""What workflow code issues (an ``Intent``), how it is matched with its record, and the envelope
the writer stamps on events: the vocabulary the run machine shares with the worker and the replayer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from runtime.log.records.events import (
    ChildRunScheduled,
    ChildRunSignalled,
    Event,
    ModelCallScheduled,
    PatchRecorded,
    TimerScheduled,
    ToolCallScheduled,
)
from runtime.workflow.canonical import args_hash, canonical_json
from runtime.workflow.futures import DurableFuture

E = TypeVar("E", bound=Event)


@dataclass
class Intent:
    """One thing workflow code asked for, at its position."""

    position: int
    kind: str  # model | tool | timer | signal | patch | child | child_signal
    name: str
    args: Any
    hash: str
    future: DurableFuture
    effect: bool = False
    key: str | None = None
    prompt_version: str | None = None
    duration_ms: int = 0
    fire_at: int = 0
    failed_attempts: int = 0
    in_doubt: bool = False
    # From the call's failure records (runtime.workflow.retry_trail): when its next attempt may start
    # (ms since the epoch; 0: at once), how many attempts were rate limits (they spend no
    # ``RetryPolicy.attempts``), and when its first attempt started (where rate-limit patience counts from).
    not_before: int = 0
    rate_limited_attempts: int = 0
    first_attempt_at: int = 0
    recorded: bool = True  # False for a signal wait without timeout: nothing to record or match
    # What the log records of ``args``: secrets replaced by hashes (runtime.workflow.redact); ``hash``
    # is over these. ``legacy_hash`` (set only when something was redacted) is the hash of the raw
    # arguments, as code before redaction recorded it, so such a record still matches on replay.
    recorded_args: Any = None
    legacy_hash: str | None = None
    compensates: int | None = None  # a compensation: the position of the effect it undoes
    # A model call: the size of its canonical recorded arguments, measured where they were hashed
    # (what runtime.workflow.tokens estimates its prompt's tokens from); 0 when not measured.
    size: int = 0
    # A model call whose messages an earlier release recorded in another form
    # (runtime.workflow.earlier_form): that form's hash, computed (then kept as a str) on the first
    # mismatch, so a run recorded by the current code never computes it.
    earlier_hash: Callable[[], str] | str | None = None
    # A tool call: the last details its attempts reported (ToolCallHeartbeat, canonical JSON), which
    # its next attempt reads back (runtime.worker.heartbeats.last_heartbeat); None before any.
    heartbeat: str | None = None

    def matches(self, recorded_hash: str) -> bool:
        if recorded_hash == self.hash or (self.legacy_hash is not None and recorded_hash == self.legacy_hash):
            return True
        if callable(self.earlier_hash):
            self.earlier_hash = self.earlier_hash()
        return self.earlier_hash is not None and recorded_hash == self.earlier_hash

    def signature(self) -> tuple[str, str, str]:
        return (self.kind, self.name, self.hash)

    def describe(self) -> str:
        shown = "" if self.kind == "model" else f" {_short(canonical_json(self.args))}"
        return f"{self.kind} {self.name!r}{shown} (args hash {self.hash})"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record_signature(event: Event) -> tuple[str, str, str]:
    if isinstance(event, ModelCallScheduled):
        return ("model", event.model, event.args_hash)
    if isinstance(event, ToolCallScheduled):
        return ("tool", event.tool, event.args_hash)
    if isinstance(event, TimerScheduled):
        if event.name == "sleep":
            return ("timer", "sleep", timer_hash("timer", "sleep", event.duration_ms))
        name = event.name.removeprefix("signal:")
        return ("signal", name, timer_hash("signal", name, event.duration_ms))
    if isinstance(event, PatchRecorded):
        return ("patch", event.patch_id, args_hash("patch", event.patch_id, None))
    if isinstance(event, ChildRunScheduled):  # runtime.workflow.children
        return ("child", event.workflow, event.args_hash)
    if isinstance(event, ChildRunSignalled):
        args = {
            "child": event.child_run_id,
            "name": event.name,
            "payload": event.payload,
            "cancel": event.cancel,
        }
        return ("child_signal", event.name, args_hash("child_signal", event.name, args))
    return (event.type, "", "")


def describe_record(event: Event) -> str:
    kind, name, digest = record_signature(event)
    shown = f" {_short(event.args)}" if isinstance(event, ToolCallScheduled) else ""
    return f"{kind} {name!r}{shown} (args hash {digest})"


def timer_hash(kind: str, name: str, duration_ms: int) -> str:
    return args_hash(kind, name, duration_ms)


@dataclass
class Stamp:
    """What the writer adds to every event it appends."""

    clock: Callable[[], int]  # wall-clock milliseconds; only live events read it
    worker: str
    epoch: int


@dataclass(frozen=True)
class Drift:
    """A model call whose prompt (messages, params or prompt_version) differs from its record."""

    position: int
    model: str
    recorded_prompt_version: str | None
    issued_prompt_version: str | None
    recorded_args_hash: str
    issued_args_hash: str


@dataclass
class InDoubt:
    kind: str
    name: str
    position: int
    idempotency_key: str | None


_set = object.__setattr__


def with_envelope(event: E, run_id: str, seq: int, occurred_at: int, worker: str, epoch: int) -> E:
    """``event`` with its envelope set, in place: every event stamped here was built a moment
    before for this purpose and is seen by nothing else yet. A copy (``dataclasses.replace``, or
    field by field) would be paid four times per live step."""
    _set(event, "run_id", run_id)
    _set(event, "seq", seq)
    _set(event, "occurred_at", occurred_at)
    _set(event, "worker", worker)
    _set(event, "epoch", epoch)
    return event
