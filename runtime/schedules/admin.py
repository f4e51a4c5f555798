"""Adding, listing, pausing, resuming and deleting schedules: what ``Client.schedules`` and
``agentlog schedule`` do."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from runtime.schedules.spec import Schedule, ScheduleError, build_schedule
from runtime.schedules.store import ScheduleStore
from runtime.schedules.timing import next_fire_time
from runtime.workflow.app import App
from runtime.workflow.input_shape import shape_error


def check_against_app(schedule: Schedule, app: App) -> None:
    """ScheduleError if ``app`` does not register the schedule's workflow or refuses its input."""
    spec = app.workflows.get(schedule.workflow)
    if spec is None:
        raise ScheduleError(
            f"unknown workflow {schedule.workflow!r} (registered: {', '.join(sorted(app.workflows))})"
        )
    problem = shape_error(spec.input_type, json.loads(schedule.input))
    if problem is not None:
        raise ScheduleError(f"input of workflow {schedule.workflow!r} has the wrong shape: {problem}")


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule, what it last fired and when it fires next."""

    schedule: Schedule
    last_fire_time: int | None  # ms since the epoch
    last_run_id: str | None
    last_refused: str | None
    next_fire_time: int | None  # None while paused


class Schedules:
    """The schedules of one deployment. Every change waits for the log's ack."""

    def __init__(self, store: ScheduleStore, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self._checked = False

    def _fresh(self) -> None:
        if not self._checked:
            self.store.check_topic()
            self._checked = True
        self.store.refresh()

    def _now(self) -> int:
        return int(self.clock() * 1000)

    def add(
        self,
        name: str,
        workflow: str,
        input: object = None,
        *,
        cron: str | None = None,
        every: str | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
        raw_input: str | None = None,
        app: App | None = None,
        replace: bool = False,
    ) -> Schedule:
        """Add a schedule firing ``workflow`` with ``input`` (JSON-able; ``raw_input``: JSON text)
        on ``cron`` (five fields, read in ``timezone``) or ``every`` (``2s``, ``5m``, ``1h``).
        ``app``: the App the workers run, to refuse a workflow it does not register or an input of
        the wrong shape now rather than at the first firing. Only fire times after now fire.
        ScheduleError naming what was wrong; also if ``name`` exists and not ``replace``."""
        text = raw_input if raw_input is not None else json.dumps(input)
        schedule = build_schedule(
            name,
            workflow,
            text,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
            active_from=self._now(),
        )
        if app is not None:
            check_against_app(schedule, app)
        self._fresh()
        if not replace and self.store.get(name) is not None:
            raise ScheduleError(f"schedule {name!r} exists: delete it first, or replace it")
        self.store.put(schedule, now_ms=self._now())
        return schedule

    def list(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        self._fresh()
        return [self._info(s) for _, s in sorted(self.store.schedules().items())]

    def get(self, name: str) -> ScheduleInfo:
        self._fresh()
        return self._info(self._existing(name))

    def pause(self, name: str) -> Schedule:
        """Stop firing ``name``; a pause of a paused schedule changes nothing."""
        self._fresh()
        schedule = self._existing(name)
        if not schedule.paused:
            schedule = dataclasses.replace(schedule, paused=True)
            self.store.put(schedule, now_ms=self._now())
        return schedule

    def resume(self, name: str) -> Schedule:
        """Fire ``name`` again from now on: fire times it missed while paused never fire."""
        self._fresh()
        schedule = self._existing(name)
        if schedule.paused:
            now = self._now()
            schedule = dataclasses.replace(schedule, paused=False, active_from=now)
            self.store.put(schedule, now_ms=now)
        return schedule

    def delete(self, name: str) -> None:
        """Remove ``name`` and what it last fired (runs it started are not touched)."""
        self._fresh()
        self._existing(name)
        self.store.delete(name)

    def _existing(self, name: str) -> Schedule:
        schedule = self.store.get(name)
        if schedule is None:
            known = ", ".join(sorted(self.store.schedules())) or "none"
            raise ScheduleError(f"no schedule named {name!r} (schedules: {known})")
        return schedule

    def _info(self, schedule: Schedule) -> ScheduleInfo:
        last = self.store.last_fired(schedule.name)
        upcoming = None
        if not schedule.paused:
            after = max(self._now(), schedule.active_from, last.fire_time if last is not None else 0)
            upcoming = next_fire_time(schedule, after)
        return ScheduleInfo(
            schedule=schedule,
            last_fire_time=None if last is None else last.fire_time,
            last_run_id=(last.fired_run or None) if last is not None else None,
            last_refused=None if last is None else last.refused,
            next_fire_time=upcoming,
        )
