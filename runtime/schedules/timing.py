"""When a schedule fires, which of its fire times are due now, and the run id of each firing.

Pure: a time in, fire times out. A firing's run id is a function of the schedule's name and the
fire time only -- never of the clock of the scheduler that fires it -- so two schedulers, a
scheduler killed mid-fire or one restarted all submit the same id for the same fire time, and
the worker starts a run id once (runtime.worker.commands ignores a repeated submission).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from runtime.schedules.spec import Schedule

# A fire time at most this late when a scheduler sees it is on time and fires whatever the
# catch-up policy: a scheduler restarted, or taking over from one killed, within this long loses
# no firing. Older ones were missed while no scheduler ran, and follow the schedule's catch-up.
ON_TIME_MS = 15_000
# The most firings ``catch_up="all"`` fires for one schedule at once (the most recent ones).
MAX_CATCH_UP = 100
_MS = timedelta(milliseconds=1)


def firing_run_id(name: str, fire_ms: int) -> str:
    """``<name>@<fire time, UTC, ISO basic>``: ``nightly@20260105T090000Z`` (milliseconds shown when
    the fire time has any)."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=fire_ms)
    millis = f".{fire_ms % 1000:03d}" if fire_ms % 1000 else ""
    return f"{name}@{moment:%Y%m%dT%H%M%S}{millis}Z"


def fire_times_back(schedule: Schedule, at_ms: int, *, after_ms: int, limit: int) -> list[int]:
    """The fire times ``t`` with ``after_ms < t <= at_ms``, newest first, at most ``limit``."""
    found: list[int] = []
    if limit <= 0 or at_ms <= after_ms:
        return found
    if schedule.every_ms:
        t = at_ms - at_ms % schedule.every_ms
        while t > after_ms and len(found) < limit:
            found.append(t)
            t -= schedule.every_ms
        return found
    zone = ZoneInfo(schedule.timezone)
    start = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms) + _MS).astimezone(zone)
    for moment in CronSim(schedule.cron, start, reverse=True):  # strictly before start: <= at_ms
        t = _ms(moment)
        if t <= after_ms:
            break
        found.append(t)
        if len(found) >= limit:
            break
    return found


def next_fire_time(schedule: Schedule, after_ms: int) -> int:
    """The first fire time strictly after ``after_ms``."""
    if schedule.every_ms:
        return after_ms - after_ms % schedule.every_ms + schedule.every_ms
    zone = ZoneInfo(schedule.timezone)
    start = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=after_ms)).astimezone(zone)
    return _ms(next(iter(CronSim(schedule.cron, start))))


def due_firings(
    schedule: Schedule,
    last_fired_ms: int | None,
    now_ms: int,
    *,
    on_time_ms: int = ON_TIME_MS,
    max_catch_up: int = MAX_CATCH_UP,
) -> list[int]:
    """The fire times to fire now, oldest first.

    Due are the fire times after both ``last_fired_ms`` (the latest one a scheduler handled) and
    the schedule's ``active_from``, up to ``now_ms``. Those at most ``on_time_ms`` late all fire.
    The older ones were missed while no scheduler ran: ``latest`` fires the most recent of them,
    ``all`` the most recent ``max_catch_up``, ``none`` none. A paused schedule fires nothing."""
    if schedule.paused:
        return []
    floor = schedule.active_from if last_fired_ms is None else max(last_fired_ms, schedule.active_from)
    late_bound = now_ms - on_time_ms
    on_time = fire_times_back(schedule, now_ms, after_ms=max(floor, late_bound), limit=10 * max_catch_up)
    missed: list[int] = []
    if schedule.catch_up != "none":
        limit = 1 if schedule.catch_up == "latest" else max_catch_up
        missed = fire_times_back(schedule, late_bound, after_ms=floor, limit=limit)
    return sorted(missed + on_time)


def _ms(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // _MS
