"""A schedule: what it submits, when, and what happens to firings missed while no scheduler ran.

Everything a schedule is given is checked when it is built (``build_schedule``), so a bad cron
expression, interval, time zone, name or input is refused with the reason before anything is
written; a scheduler then only ever reads schedules that parse.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from runtime.errors import TerminalError
from runtime.workflow.canonical import canonical_json

CatchUp = Literal["latest", "all", "none"]
CATCH_UPS: tuple[str, ...] = get_args(CatchUp)

# A name is part of every firing's run id and of the schedule's Kafka key: short and plain.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# The usual shorthands, spelt out (cronsim reads five fields only).
CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
EVERY_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
EVERY_RE = re.compile(r"(\d+)([smhd])")


class ScheduleError(TerminalError, ValueError):
    """A schedule that cannot be kept as given; the message names what was wrong."""


@dataclass(frozen=True)
class Schedule:
    """A schedule as stored. Exactly one of ``cron`` (five fields, read in ``timezone``) and
    ``every_ms`` (fire times are its multiples since the Unix epoch, so every scheduler computes
    the same ones) is set. Only fire times after ``active_from`` (ms) fire: when it was added or
    last resumed."""

    name: str
    workflow: str
    input: str  # canonical JSON
    cron: str = ""
    every_ms: int = 0
    timezone: str = "UTC"
    catch_up: CatchUp = "latest"
    paused: bool = False
    active_from: int = 0

    @property
    def when(self) -> str:
        """The cron expression (and its zone) or the interval, as a person reads it."""
        if self.cron:
            return self.cron if self.timezone == "UTC" else f"{self.cron} ({self.timezone})"
        return f"every {describe_every(self.every_ms)}"


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise ScheduleError(
            f"schedule name {name!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def check_cron(expression: str) -> str:
    """The expression as stored (an alias spelt out); ScheduleError naming what does not parse."""
    cron = CRON_ALIASES.get(expression.strip(), expression.strip())
    fields = cron.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron expression {expression!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}; for seconds use --every (e.g. --every 30s)"
        )
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as error:
        raise ScheduleError(f"cron expression {expression!r} does not parse: {error}") from error
    return " ".join(fields)


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ScheduleError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Paris or UTC"
        ) from error
    return name


def parse_every(text: str) -> int:
    """``2s``, ``5m``, ``1h``, ``1d`` (or a sum, ``1h30m``) in milliseconds; at least one second."""
    compact = text.strip().replace(" ", "")
    parts = EVERY_RE.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ScheduleError(
            f"interval {text!r}: expected a number and a unit s, m, h or d (e.g. 2s, 5m, 1h30m)"
        )
    ms = sum(int(n) * EVERY_UNITS[u] for n, u in parts)
    if ms < 1_000:
        raise ScheduleError(f"interval {text!r}: must be at least 1s")
    return ms


def describe_every(ms: int) -> str:
    out, rest = "", ms
    for unit, size in sorted(EVERY_UNITS.items(), key=lambda item: -item[1]):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or f"{ms}ms"


def check_input(text: str) -> str:
    try:
        return canonical_json(json.loads(text))
    except json.JSONDecodeError as error:
        raise ScheduleError(f"--input is not JSON: {error}") from error


def build_schedule(
    name: str,
    workflow: str,
    input_json: str,
    *,
    cron: str | None = None,
    every: str | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    active_from: int,
) -> Schedule:
    """A checked schedule; ScheduleError naming the first thing wrong."""
    check_name(name)
    if not workflow:
        raise ScheduleError("a schedule needs a workflow")
    if (cron is None) == (every is None):
        raise ScheduleError("give exactly one of --cron and --every")
    if catch_up not in CATCH_UPS:
        raise ScheduleError(f"catch-up {catch_up!r}: one of {', '.join(CATCH_UPS)}")
    check_timezone(timezone)
    if every is not None and timezone != "UTC":
        raise ScheduleError("--timezone applies to --cron only (an interval counts from the Unix epoch)")
    return Schedule(
        name=name,
        workflow=workflow,
        input=check_input(input_json),
        cron=check_cron(cron) if cron is not None else "",
        every_ms=parse_every(every) if every is not None else 0,
        timezone=timezone,
        catch_up=cast(CatchUp, catch_up),  # checked against CATCH_UPS above
        active_from=active_from,
    )
