"""A run's status as read from its events: what ``RunHandle.status`` returns and ``agentlog status`` prints."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runtime.log.records.events import (
    ChildRunEnded,
    ChildRunScheduled,
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    PermitAwaited,
    PermitGranted,
    PromptDrifted,
    Redecided,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunRejected,
    RunStarted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallHeartbeat,
    ToolCallScheduled,
)
from runtime.log.records.status import RunState, status_after
from runtime.workflow.limits import DIMENSION_LABELS


@dataclass(frozen=True)
class LoggedEvent:
    """One of a run's events with where it sits in the events topic."""

    offset: int
    size: int  # bytes of the record's value
    event: Event
    # Set when a client with the workers' verify key found that no worker wrote this record
    # (runtime.log.records.signing): where it is and why; it is left out of the run's status.
    forged: str | None = None
    # Set by a results tail that read the run's ending but not its start: not judged yet.
    unchecked: bool = False


@dataclass(frozen=True)
class InDoubtCall:
    """A call that may or may not have taken effect: its worker died while it was in flight."""

    kind: Literal["model", "tool"]
    position: int
    idempotency_key: str | None  # tools only: the key the service can deduplicate on
    name: str | None  # the model or tool

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": self.position,
            "idempotency_key": self.idempotency_key,
            "name": self.name,
        }


@dataclass(frozen=True)
class RetryWait:
    """A call waiting out a rate limit: its next attempt starts no earlier than ``retry_at`` (ms since
    the epoch), as its last failure recorded (``ModelCallFailed.retry_at``)."""

    kind: Literal["model", "tool"]
    position: int
    name: str | None
    retry_at: int
    attempt: int  # the attempt that was rate limited
    error: str  # its message: what the provider said and the wait it asked for

    def describe(self, now_ms: int) -> str:
        """``model 'planner' rate limited, retrying at 07:28:30 UTC (in 25 s)``."""
        at = datetime.fromtimestamp(self.retry_at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        left = max(0, math.ceil((self.retry_at - now_ms) / 1000))
        return f"{self.kind} {self.name!r} rate limited, retrying at {at} UTC (in {left} s)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": self.position,
            "name": self.name,
            "retry_at": self.retry_at,
            "attempt": self.attempt,
            "error": self.error,
        }


@dataclass(frozen=True)
class CompensationCall:
    """A compensating call of the run (ctx.tool(..., compensate_with=...)) and how it went."""

    position: int
    tool: str
    compensates: int  # the position of the effect it undoes
    idempotency_key: str | None
    state: Literal["scheduled", "completed", "failed"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "tool": self.tool,
            "compensates": self.compensates,
            "idempotency_key": self.idempotency_key,
            "state": self.state,
        }


@dataclass(frozen=True)
class Redecision:
    """A recorded decision the current code replaced (``ctx.redecide``); values are decoded JSON."""

    position: int
    original: Any
    replacement: Any
    check: Any
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "original": self.original,
            "replacement": self.replacement,
            "check": self.check,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class PromptDrift:
    """A model call served from history although the code now issues another prompt (PromptDrifted)."""

    position: int
    model: str
    recorded_prompt_version: str | None
    issued_prompt_version: str | None

    def describe(self) -> str:
        return (
            f"position {self.position} decided under prompt {self.recorded_prompt_version}; "
            f"code now issues {self.issued_prompt_version}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "model": self.model,
            "recorded_prompt_version": self.recorded_prompt_version,
            "issued_prompt_version": self.issued_prompt_version,
        }


# A recorded dimension is a str (a newer writer may name another): looked up as one.
_DIMENSION_LABELS = dict[str, str](DIMENSION_LABELS.items())


@dataclass(frozen=True)
class PermitWait:
    """A call waiting for a permit of a declared limit (PermitAwaited, not granted yet)."""

    position: int
    limit: str
    key: str | None
    dimension: str
    since_ms: int  # when the wait began (the record's time)

    def describe(self, now_ms: int) -> str:
        """``waiting for openai requests/min, 12 s``."""
        label = _DIMENSION_LABELS.get(self.dimension, self.dimension)
        what = f"{self.limit if self.key is None else f'{self.limit}[{self.key}]'} {label}"
        return f"waiting for {what}, {max(0, now_ms - self.since_ms) // 1000} s (position {self.position})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "limit": self.limit,
            "key": self.key,
            "dimension": self.dimension,
            "since_ms": self.since_ms,
        }


@dataclass(frozen=True)
class CallHeartbeat:
    """The last progress a tool call in flight reported (ToolCallHeartbeat): its details (decoded
    JSON), the attempt that reported them and when (ms since the epoch)."""

    position: int
    name: str | None
    attempt: int
    details: Any
    beat_at: int

    def describe(self, now_ms: int) -> str:
        """``tool 'send_emails' at position 2: {"sent":40} (3 s ago, attempt 1)``."""
        age = max(0, now_ms - self.beat_at) // 1000
        shown = json.dumps(self.details, separators=(",", ":"))
        shown = shown if len(shown) <= 200 else shown[:197] + "..."
        return (
            f"tool {self.name!r} at position {self.position}: {shown} ({age} s ago, attempt {self.attempt})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "name": self.name,
            "attempt": self.attempt,
            "details": self.details,
            "beat_at": self.beat_at,
        }


@dataclass(frozen=True)
class ResetOrigin:
    """The run and position a reset run was cut from (``agentlog reset``)."""

    run_id: str | None
    position: int

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "position": self.position}


@dataclass(frozen=True)
class ForkOrigin:
    """The run and position a fork was started from (``agentlog fork``), and what it overrides."""

    run_id: str | None
    position: int
    overrides: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "position": self.position, "overrides": self.overrides}

    def describe(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in sorted(self.overrides.items())) or "(no overrides)"
        return f"from {self.run_id} at position {self.position}, {shown}"


@dataclass(frozen=True)
class ChildRun:
    """A child run this run started (ctx.child), as the run's own history tells it: ``running``
    until its ending reached the run, then completed, failed, cancelled or rejected."""

    run_id: str
    workflow: str
    position: int
    status: str
    parent_close: str
    tokens: int = 0  # a budgeted child's, once it ended: counted in the parent's budget
    model_calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return f"{self.run_id} {self.workflow!r} {self.status} (position {self.position}, parent_close={self.parent_close})"


@dataclass(frozen=True)
class BudgetUse:
    """The budget that binds a run (RunStarted.budget) and what its record says it used: tokens as
    its model calls reported them, and its model calls. Cost is the audit store's to price
    (``agentlog audit cost``); the worker prices it from its own price table to enforce it."""

    budget: dict[str, Any]
    tokens: int
    model_calls: int

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "tokens": self.tokens, "model_calls": self.model_calls}

    def describe(self) -> str:
        used = [f"{self.tokens} tokens", f"{self.model_calls} model calls"]
        limits = [f"{k} {v}" for k, v in self.budget.items() if k != "on_exceeded"]
        return (
            f"used {', '.join(used)} of {', '.join(limits)} (on exceeded: {self.budget.get('on_exceeded')})"
        )


@dataclass(frozen=True)
class RunStatus:
    """A run's status, size, in-doubt calls and outcome, computed from its events."""

    run_id: str
    workflow: str | None
    status: RunState
    events: int
    bytes: int
    in_doubt: tuple[InDoubtCall, ...] = ()
    redecided: tuple[Redecision, ...] = ()
    reset_from: ResetOrigin | None = None
    result: Any = None  # a completed run's result (decoded JSON); {"continued_as": id} when continued
    reason: str | None = None  # why a run failed, was cancelled, parked, rejected or continued
    drift: tuple[PromptDrift, ...] = ()  # model calls whose prompt changed under replay
    continued_as: str | None = None  # the run this one continued as (ctx.continue_as_new)
    continued_from: str | None = None  # the run that continued as this one
    forked_from: ForkOrigin | None = None  # a fork (its effects skipped): where it was cut and its overrides
    compensations: tuple[CompensationCall, ...] = ()  # in the order they ran (newest effect first)
    budget: BudgetUse | None = None  # a run with a budget: the budget and what it used
    waiting_for: tuple[PermitWait, ...] = ()  # calls of a running run waiting for a limit's permit
    retrying: tuple[RetryWait, ...] = ()  # calls of a running run waiting out a rate limit
    heartbeats: tuple[CallHeartbeat, ...] = ()  # tool calls of a running run: their last heartbeat
    parent_run_id: str | None = None  # a child run: the run that started it (ctx.child)
    children: tuple[ChildRun, ...] = ()  # the child runs this run started, in the order it started them
    # Records no worker wrote (read with the verify key), left out of the above: where and why each.
    forged: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The keys and values of ``agentlog status --json``."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "events": self.events,
            "bytes": self.bytes,
            "in_doubt": [call.as_dict() for call in self.in_doubt],
            "redecided": [entry.as_dict() for entry in self.redecided],
            "reset_from": self.reset_from.as_dict() if self.reset_from is not None else None,
            "result": self.result,
            "reason": self.reason,
            "drift": [entry.as_dict() for entry in self.drift],
            "continued_as": self.continued_as,
            "continued_from": self.continued_from,
            "forked_from": self.forked_from.as_dict() if self.forked_from is not None else None,
            "compensations": [entry.as_dict() for entry in self.compensations],
            "budget": self.budget.as_dict() if self.budget is not None else None,
            "waiting_for": [entry.as_dict() for entry in self.waiting_for],
            "retrying": [entry.as_dict() for entry in self.retrying],
            "heartbeats": [entry.as_dict() for entry in self.heartbeats],
            "parent_run_id": self.parent_run_id,
            "children": [child.as_dict() for child in self.children],
            "forged": list(self.forged),
        }

    def to_json(self) -> str:
        """``agentlog status --json``."""
        return json.dumps(self.as_dict())


def summarize(run_id: str, logged: Sequence[LoggedEvent]) -> RunStatus:
    """The run's status from its events in log order (fenced records already left out)."""
    status: RunState = "unknown"
    workflow: str | None = None
    result: Any = None
    reason: str | None = None
    scheduled_keys: dict[int, str | None] = {}
    in_doubt: dict[int, tuple[Literal["model", "tool"], str | None]] = {}  # position -> kind, key
    redecided: list[Redecision] = []
    drift: list[PromptDrift] = []
    reset_from: ResetOrigin | None = None
    forked_from: ForkOrigin | None = None
    names: dict[int, str] = {}
    continued_as: str | None = None
    continued_from: str | None = None
    compensations: dict[int, CompensationCall] = {}  # position -> the compensating call
    budget: str | None = None
    spent = [0, 0]  # tokens, model calls
    waits: dict[int, PermitWait] = {}  # position -> its call's wait for a permit, until granted
    retrying: dict[int, RetryWait] = {}  # position -> the rate limit its call waits out
    beats: dict[int, CallHeartbeat] = {}  # position -> its call's last heartbeat, until it ends
    parent_run_id: str | None = None
    children: dict[str, ChildRun] = {}
    forged: list[str] = []
    for item in logged:
        event = item.event
        if item.forged is not None:
            forged.append(item.forged)
            continue
        if isinstance(event, ChildRunScheduled):
            children[event.child_run_id] = ChildRun(
                event.child_run_id, event.workflow, event.position, "running", event.parent_close
            )
        elif isinstance(event, ChildRunEnded) and event.child_run_id in children:
            calls = json.loads(event.spend) if event.spend else []
            tokens = sum(call[2] + call[3] for call in calls)
            spent[0] += tokens
            spent[1] += len(calls)
            children[event.child_run_id] = dataclasses.replace(
                children[event.child_run_id],
                status=event.child_status,
                tokens=tokens,
                model_calls=len(calls),
            )
        if isinstance(event, ModelCallCompleted):
            spent[0] += (event.input_tokens or 0) + (event.output_tokens or 0)
            spent[1] += 1
        if isinstance(event, (PermitAwaited, PermitGranted)):
            if isinstance(event, PermitAwaited):
                waits[event.position] = PermitWait(
                    event.position, event.limit, event.key, event.dimension, event.occurred_at
                )
            else:
                waits.pop(event.position, None)
        elif isinstance(event, Redecided):
            redecided.append(
                Redecision(
                    position=event.position,
                    original=json.loads(event.original),
                    replacement=json.loads(event.replacement),
                    check=json.loads(event.check),
                    reason=event.reason,
                )
            )
        elif isinstance(event, PromptDrifted):
            drift.append(
                PromptDrift(
                    event.position, event.model, event.recorded_prompt_version, event.issued_prompt_version
                )
            )
        elif isinstance(event, RunStarted):
            workflow, budget = event.workflow, event.budget
            parent_run_id = event.child_of
            if event.fork_overrides is not None:  # a fork is a reset that skips effects
                overrides = json.loads(event.fork_overrides) if event.fork_overrides else {}
                forked_from = ForkOrigin(event.parent_run_id, event.reset_position, overrides)
            if event.reset_position:
                reset_from = ResetOrigin(event.parent_run_id, event.reset_position)
            else:  # a reset cuts at position 1 or later: a parent without one continued as this run
                continued_from = event.parent_run_id
        elif isinstance(event, ToolCallScheduled):
            scheduled_keys[event.position] = event.idempotency_key
            names[event.position] = event.tool
            if event.compensates is not None:
                compensations[event.position] = CompensationCall(
                    event.position, event.tool, event.compensates, event.idempotency_key, "scheduled"
                )
        elif isinstance(event, ModelCallScheduled):
            scheduled_keys[event.position] = None
            names[event.position] = event.model
        elif (
            isinstance(event, (ModelCallCompleted, ToolCallCompleted, ModelCallFailed, ToolCallFailed))
            and event.in_doubt
        ):
            kind: Literal["model", "tool"] = (
                "model" if isinstance(event, (ModelCallCompleted, ModelCallFailed)) else "tool"
            )
            in_doubt.setdefault(event.position, (kind, scheduled_keys.get(event.position)))
        undo = compensations.get(getattr(event, "position", -1))
        if undo is not None and isinstance(event, ToolCallCompleted):
            compensations[undo.position] = dataclasses.replace(undo, state="completed")
        elif undo is not None and isinstance(event, ToolCallFailed) and event.final:
            compensations[undo.position] = dataclasses.replace(undo, state="failed")
        if isinstance(event, (ModelCallCompleted, ToolCallCompleted, ModelCallFailed, ToolCallFailed)):
            _note_retry(retrying, event, names)
        if isinstance(event, ToolCallHeartbeat):
            beats[event.position] = CallHeartbeat(
                event.position,
                names.get(event.position),
                event.attempt,
                json.loads(event.details),
                event.beat_at or event.occurred_at,
            )
        elif isinstance(event, ToolCallCompleted) or (isinstance(event, ToolCallFailed) and event.final):
            beats.pop(event.position, None)
        status = status_after(event.type, status)
        if isinstance(event, RunCompleted):
            result = json.loads(event.result)
        elif isinstance(event, RunFailed):
            reason = f"{event.error_type}: {event.error}"
        elif isinstance(event, (RunRejected, RunParked, RunCancelled)):
            reason = event.reason
            workflow = workflow or getattr(event, "workflow", None)
        elif isinstance(event, RunContinuedAsNew):
            result, reason = {"continued_as": event.new_run_id}, f"continued as {event.new_run_id}"
            continued_as = event.new_run_id
    return RunStatus(
        run_id=run_id,
        workflow=workflow,
        status=status,
        events=len(logged),
        bytes=sum(e.size for e in logged),
        in_doubt=tuple(
            InDoubtCall(kind, position, key, names.get(position))
            for position, (kind, key) in in_doubt.items()
        ),
        redecided=tuple(redecided),
        reset_from=reset_from,
        forked_from=forked_from,
        result=result,
        reason=reason,
        drift=tuple(drift),
        continued_as=continued_as,
        continued_from=continued_from,
        compensations=tuple(compensations.values()),
        budget=BudgetUse(json.loads(budget), *spent) if budget else None,
        waiting_for=tuple(waits.values()) if status == "running" else (),
        retrying=tuple(retrying.values()) if status == "running" else (),
        heartbeats=tuple(beats.values()) if status == "running" else (),
        parent_run_id=parent_run_id,
        children=tuple(children.values()),
        forged=tuple(forged),
    )


def _note_retry(
    retrying: dict[int, RetryWait],
    event: ModelCallCompleted | ToolCallCompleted | ModelCallFailed | ToolCallFailed,
    names: dict[int, str],
) -> None:
    """A call's outcome ends the wait recorded before it; a rate limit's failure starts one."""
    retrying.pop(event.position, None)
    if isinstance(event, (ModelCallFailed, ToolCallFailed)) and event.retry_at > 0 and not event.final:
        kind: Literal["model", "tool"] = "model" if isinstance(event, ModelCallFailed) else "tool"
        retrying[event.position] = RetryWait(
            kind, event.position, names.get(event.position), event.retry_at, event.attempt, event.error
        )
