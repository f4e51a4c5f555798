"""Run deadlines: when a run is cancelled if it has not ended, and how that time is written down.

A deadline comes from the workflow (``@app.workflow(..., deadline=...)``: a duration counted from the
run's start) and from the submission (``Client.submit(..., deadline=...)``: a time, or a duration the
client turns into one, so a submission read late by a worker keeps its meaning). The worker records
the earlier of the two on ``RunStarted.deadline`` (ms since the epoch): the record is the decision,
so a replay, a takeover and a run woken from the run cache arm the same time. At it the run is
cancelled (runtime.workflow.cancellation), with a reason that names the deadline.

A deadline is a run-level durable timer at ``DEADLINE_POSITION``: no workflow command has that
position (they start at 1), so it shares the run cache's and the checkpoints' timer bookkeeping
(keyed by run id and position) with ``ctx.sleep`` timers without meeting one.
"""

from __future__ import annotations

import datetime as dt

from runtime.errors import AgentlogError
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent

DEADLINE_POSITION = 0  # the deadline's timer: commands' positions start at 1


class DeadlineError(AgentlogError):
    """A deadline that cannot bind a run: not a time or a positive duration, or already past."""


def duration_ms(value: dt.timedelta | float | int, what: str) -> int:
    """A positive duration (a timedelta or seconds) in ms; DeadlineError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (dt.timedelta, int, float)):
        raise DeadlineError(f"{what} must be a timedelta or seconds, got {value!r}")
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    if not seconds > 0:  # also NaN
        raise DeadlineError(f"{what} must be a positive duration, got {value!r}")
    return int(seconds * 1000)


def absolute_ms(value: dt.datetime | dt.timedelta | float | int, now_ms: int) -> int:
    """A submission's deadline as ms since the epoch: a time (timezone-aware), or a duration from
    ``now_ms``. Refused (DeadlineError) if it is not after ``now_ms``."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise DeadlineError(
                f"deadline {value.isoformat()} has no timezone: give one (e.g. {value.isoformat()}+00:00)"
            )
        at = int(value.timestamp() * 1000)
        if at <= now_ms:
            raise DeadlineError(f"deadline {describe(at)} is in the past (now {describe(now_ms)})")
        return at
    return now_ms + duration_ms(value, "deadline")


def binding(submitted: int | None, workflow_ms: int | None, started_at: int) -> int | None:
    """The deadline that binds a run started at ``started_at``: the earlier of the submission's and
    the workflow's (a duration from the start); None if neither has one."""
    candidates = [d for d in (submitted, None if workflow_ms is None else started_at + workflow_ms) if d]
    return min(candidates) if candidates else None


def describe(at_ms: int) -> str:
    """A time as UTC ISO 8601 to the millisecond (how reasons and errors name a deadline)."""
    when = dt.datetime.fromtimestamp(at_ms / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def reason(at_ms: int) -> str:
    """The reason a run cancelled by its deadline ends with."""
    return f"deadline {describe(at_ms)} passed"


def deadline_intent(at_ms: int) -> Intent:
    """The run's deadline as a timer intent for the worker to arm (never a workflow command)."""
    return Intent(
        DEADLINE_POSITION, "timer", "deadline", None, "", DurableFuture(DEADLINE_POSITION), fire_at=at_ms
    )
