"""A run's events (``analytics.audit.run_events``) as a timeline: calls with their attempts, waits,
worker changes and flags. Pure: no store, no HTML (``ui.svg`` draws it).

A *step* is one decision and what follows it: each model call opens a step, and the tool calls
after it belong to it (refund-40's 40 steps are its 40 planner calls, each followed by one tool).
Tool calls before the first model call are step 0.

Attempts. An outcome record (``...Completed``/``...Failed``) ends an attempt; it began
``latency_us`` earlier. A completion marked ``in_doubt`` was re-executed by a worker that found the
call scheduled and unanswered (its predecessor died mid-call): the lost first attempt is drawn from
the ``...Scheduled`` record to the next worker's claim, so the crash is visible where it happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analytics.audit import iso_to_ms
from analytics.results import JsonValue
from runtime.log.records.events import ModelCallCompleted
from runtime.log.records.responses import full_text, is_short
from runtime.workflow.limits import DIMENSION_LABELS

_OUTCOMES = ("Completed", "Failed")


@dataclass
class Attempt:
    start_ms: int
    end_ms: int | None  # None: no outcome (yet, or ever: a lost attempt)
    outcome: str  # completed, failed, retrying, lost, pending
    epoch: int | None
    worker: str | None
    number: int
    in_doubt: bool = False
    error: str | None = None


@dataclass
class Call:
    position: int
    kind: str  # model or tool
    name: str
    step: int
    scheduled_ms: int
    epoch: int | None
    worker: str | None
    fields: dict[str, JsonValue] = field(default_factory=dict)  # the Scheduled record's fields
    attempts: list[Attempt] = field(default_factory=list)
    result: JsonValue = None
    error: str | None = None
    in_doubt: bool = False
    flags: list[Flag] = field(default_factory=list)
    usage: dict[str, JsonValue] = field(
        default_factory=dict
    )  # tokens, cost, prompt (when the store has them)

    @property
    def outcome(self) -> str:
        return self.attempts[-1].outcome if self.attempts else "pending"

    @property
    def end_ms(self) -> int | None:
        ends = [a.end_ms for a in self.attempts if a.end_ms is not None]
        return max(ends) if ends else None


@dataclass
class Span:
    """A timer or a signal wait, from its record to its firing (or the signal's arrival)."""

    position: int
    kind: str  # timer or signal
    name: str
    start_ms: int
    end_ms: int | None
    fire_at_ms: int | None
    step: int


@dataclass
class EpochChange:
    at_ms: int
    epoch: int
    worker: str | None
    previous_epoch: int | None


@dataclass
class Flag:
    kind: str  # redecided, non_determinism, prompt_drift, parked, permit_wait
    position: int | None
    at_ms: int
    detail: str


@dataclass
class Timeline:
    calls: list[Call]
    spans: list[Span]
    epochs: list[EpochChange]
    flags: list[Flag]
    start_ms: int
    end_ms: int
    steps: int
    events: int
    parent_run_id: str | None = None  # the run this one was reset or continued from
    reset_position: int | None = None
    child_of: str | None = None  # a child run: the run that started it (ctx.child)
    # The child runs this run started: child run id -> [workflow, status as this run's history tells it].
    children: dict[str, list[str]] = field(default_factory=dict)

    def step_calls(self, step: int) -> list[Call]:
        return [c for c in self.calls if c.step == step]

    @property
    def in_doubt(self) -> list[Call]:
        return [c for c in self.calls if c.in_doubt]


def _int(value: JsonValue) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _split(kind: str) -> tuple[str, str] | None:
    """``ModelCallCompleted`` -> (model, Completed)."""
    for call_kind in ("Model", "Tool"):
        prefix = f"{call_kind}Call"
        if kind.startswith(prefix):
            return call_kind.lower(), kind[len(prefix) :]
    return None


def build(
    events: Sequence[Mapping[str, JsonValue]],
    claims: Mapping[int, Mapping[str, JsonValue]] | None = None,
    usage: Mapping[int, Mapping[str, JsonValue]] | None = None,
    now_ms: int | None = None,
) -> Timeline:
    """The timeline of one run's events (log order). ``claims``: epoch -> its EpochClaimed row
    (``analytics.explore.claims``), for when a worker took over; ``usage``: position -> tokens/cost."""
    claims = claims or {}
    usage = usage or {}
    calls: dict[tuple[str, int], Call] = {}
    spans: dict[int, Span] = {}
    flags: list[Flag] = []
    permit_waits: dict[int, Flag] = {}  # position -> the flag of its call's wait for a permit, until granted
    epochs: list[EpochChange] = []
    step = 0
    last_epoch: int | None = None
    times: list[int] = []
    parent: tuple[str | None, int | None] = (None, None)
    family: dict[str, list[str]] = {}  # "" -> [the parent of a child run]; child run id -> [workflow, status]
    for event in events:
        kind = event.get("type")
        at = _int(event.get("occurred_at"))
        if not isinstance(kind, str) or at is None:
            continue
        times.append(at)
        epoch = _int(event.get("epoch"))
        worker = event.get("worker")
        worker_name = str(worker) if worker else None
        if epoch is not None and epoch != last_epoch:
            if last_epoch is not None:
                claim = claims.get(epoch, {})
                claimed_at = _int(iso_to_ms(claim.get("occurred_at"))) if claim else None
                epochs.append(
                    EpochChange(
                        claimed_at if claimed_at is not None else at,
                        epoch,
                        str(claim.get("worker") or worker_name or "") or None,
                        last_epoch,
                    )
                )
            last_epoch = epoch
        if kind in ("RunStarted", "ChildRunScheduled", "ChildRunEnded"):
            _note_family(family, kind, event)
        if kind == "RunStarted" and event.get("parent_run_id"):
            parent = (str(event.get("parent_run_id")), _int(event.get("reset_position")) or None)
        position = _int(event.get("position"))
        split = _split(kind)
        if split is not None and position is not None:
            call_kind, phase = split
            _call_event(calls, call_kind, phase, position, event, at, epoch, worker_name, step)
            if call_kind == "model" and phase == "Scheduled":
                step += 1
                calls[(call_kind, position)].step = step
            continue
        if kind == "TimerScheduled" and position is not None:
            name = str(event.get("name") or "sleep")
            spans[position] = Span(
                position,
                "timer" if name == "sleep" else "signal",
                name,
                at,
                None,
                _int(event.get("fire_at")),
                step,
            )
        elif kind == "TimerFired" and position in spans:
            spans[position].end_ms = at
        elif kind == "SignalReceived":
            signal = str(event.get("name"))
            waiting = [
                s for s in spans.values() if s.kind == "signal" and s.name == signal and s.end_ms is None
            ]
            if waiting:
                waiting[0].end_ms = at
        elif kind in ("Redecided", "NonDeterminismDetected", "PromptDrifted", "RunParked"):
            flags.append(Flag(_FLAG_KINDS[kind], position, at, _flag_detail(kind, event)))
        elif kind in ("PermitAwaited", "PermitGranted") and position is not None:
            _permit_flag(flags, permit_waits, kind, position, event, at, now_ms)
    ordered = sorted(calls.values(), key=lambda c: c.position)
    for flag in flags:
        target = _flagged_call(ordered, flag.position)
        if target is not None:
            target.flags.append(flag)
    for call in ordered:
        call.usage = dict(usage.get(call.position, {})) if call.kind == "model" else {}
        _close_lost_attempts(call, epochs)
    start = min(times) if times else 0
    end = max(times) if times else 0
    open_end = max(end, now_ms or end)
    for call in ordered:
        for attempt in call.attempts:
            if attempt.end_ms is None and attempt.outcome == "pending":
                end = max(end, open_end)
    return Timeline(
        ordered,
        sorted(spans.values(), key=lambda s: s.position),
        epochs,
        flags,
        start,
        end,
        step,
        len(times),
        *parent,
        next(iter(family.pop("", [])), None),
        family,
    )


def _note_family(family: dict[str, list[str]], kind: str, event: Mapping[str, JsonValue]) -> None:
    """A child run's parent, a run's children and their endings (runtime.workflow.children)."""
    if kind == "RunStarted":
        if event.get("child_of"):
            family[""] = [str(event.get("child_of"))]
    elif kind == "ChildRunScheduled" and event.get("child_run_id"):
        family[str(event.get("child_run_id"))] = [str(event.get("workflow") or ""), "running"]
    elif str(event.get("child_run_id")) in family:
        family[str(event.get("child_run_id"))][1] = str(event.get("child_status") or "ended")


_FLAG_KINDS = {
    "Redecided": "redecided",
    "NonDeterminismDetected": "non_determinism",
    "PromptDrifted": "prompt_drift",
    "RunParked": "parked",
}


def _flag_detail(kind: str, event: Mapping[str, JsonValue]) -> str:
    if kind == "Redecided":
        return f"check {event.get('check')}: {event.get('reason') or 'no longer valid'}; replaced {event.get('original')} with {event.get('replacement')}"
    if kind == "NonDeterminismDetected":
        return (
            f"{event.get('message')} (history: {event.get('expected')}; code issued: {event.get('issued')})"
        )
    if kind == "PromptDrifted":
        return f"decided under prompt {event.get('recorded_prompt_version')}; code now issues {event.get('issued_prompt_version')}"
    return str(event.get("reason") or "")


def _permit_flag(
    flags: list[Flag],
    waiting: dict[int, Flag],
    kind: str,
    position: int,
    event: Mapping[str, JsonValue],
    at: int,
    now_ms: int | None,
) -> None:
    """A call's wait for a limit's permit, as a flag on the call: "waited 40.1 s for openai
    requests/min" once granted, "waiting for ..." until then."""
    limit = str(event.get("limit") or "?")
    key = event.get("key")
    what = f"{limit}[{key}]" if key else limit
    label = _DIMENSION_LABELS.get(str(event.get("dimension")), str(event.get("dimension")))
    if kind == "PermitAwaited":
        since = f", {(now_ms - at) / 1000:.1f} s so far" if now_ms is not None else ""
        flag = waiting[position] = Flag("permit_wait", position, at, f"waiting for {what} {label}{since}")
        flags.append(flag)
        return
    began = waiting.pop(position, None)
    if began is not None:
        flags.remove(began)
    waited = (_int(event.get("waited_ms")) or 0) / 1000
    flags.append(Flag("permit_wait", position, at, f"waited {waited:.1f} s for {what} {label}"))


# A recorded dimension is a str (a newer writer may name another): looked up as one.
_DIMENSION_LABELS = dict[str, str](DIMENSION_LABELS.items())


def _flagged_call(calls: Sequence[Call], position: int | None) -> Call | None:
    if position is None:
        return None
    exact = [c for c in calls if c.position == position]
    if exact:
        return exact[0]
    # A Redecided record sits at its own position; the replacement decision is the model call after it.
    later = [c for c in calls if c.position > position and c.kind == "model"]
    return later[0] if later else None


def _call_event(
    calls: dict[tuple[str, int], Call],
    kind: str,
    phase: str,
    position: int,
    event: Mapping[str, JsonValue],
    at: int,
    epoch: int | None,
    worker: str | None,
    step: int,
) -> None:
    key = (kind, position)
    if phase == "Scheduled":
        name = event.get("model") if kind == "model" else event.get("tool")
        fields = {k: v for k, v in event.items() if v is not None}
        if key not in calls:
            calls[key] = Call(position, kind, str(name or "?"), step, at, epoch, worker, fields)
        return
    if phase not in _OUTCOMES:
        return
    call = calls.get(key)
    if call is None:  # an outcome without its Scheduled record (a store missing rows): still show it
        call = calls[key] = Call(position, kind, "?", step, at, epoch, worker)
    latency = (_int(event.get("latency_us")) or 0) // 1000
    previous_end = call.attempts[-1].end_ms if call.attempts else call.scheduled_ms
    start = (
        max(previous_end or call.scheduled_ms, at - latency)
        if latency
        else (previous_end or call.scheduled_ms)
    )
    in_doubt = bool(event.get("in_doubt"))
    number = _int(event.get("attempt")) or len(call.attempts) + 1
    if in_doubt and not call.attempts:
        # The first attempt was lost with its worker; its end is set once epochs are known.
        call.attempts.append(Attempt(call.scheduled_ms, None, "lost", call.epoch, call.worker, 0, True))
        start = at - latency if latency else at
    if phase == "Completed":
        outcome = "completed"
        call.result = _shown_result(kind, event)
        if event.get("result") is None and event.get("result_sha256"):
            call.result = (
                f"(out of line: {event.get('result_size')} bytes, sha256 {event.get('result_sha256')})"
            )
    else:
        final = event.get("final")
        outcome = "failed" if final is None or bool(final) else "retrying"
        call.error = f"{event.get('error_type')}: {event.get('error')}"
    call.in_doubt = call.in_doubt or in_doubt
    call.attempts.append(
        Attempt(
            start, at, outcome, epoch, worker, number, in_doubt, call.error if phase == "Failed" else None
        )
    )


def _shown_result(kind: str, event: Mapping[str, JsonValue]) -> JsonValue:
    """A call's result as the call returned it: a framework response recorded short is shown whole
    (runtime.log.records.responses), with what its record's fields hold."""
    result = event.get("result")
    if kind != "model" or not isinstance(result, str) or not is_short(result):
        return result
    model = event.get("response_model")
    record = ModelCallCompleted(
        run_id="",
        position=0,
        result=result,
        response_model=model if isinstance(model, str) else None,
        input_tokens=_int(event.get("input_tokens")),
        output_tokens=_int(event.get("output_tokens")),
        cached_tokens=_int(event.get("cached_tokens")),
    )
    return full_text(record)


def _close_lost_attempts(call: Call, epochs: Sequence[EpochChange]) -> None:
    for attempt in call.attempts:
        if attempt.outcome != "lost" or attempt.end_ms is not None:
            continue
        after = [e.at_ms for e in epochs if e.at_ms >= attempt.start_ms]
        following = [a.start_ms for a in call.attempts if a is not attempt and a.start_ms >= attempt.start_ms]
        attempt.end_ms = min(after) if after else (min(following) if following else attempt.start_ms)
    if not call.attempts:
        call.attempts.append(Attempt(call.scheduled_ms, None, "pending", call.epoch, call.worker, 1))
