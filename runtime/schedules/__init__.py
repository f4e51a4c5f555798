"""Schedules: runs started on a cron or an interval, kept in a compacted topic (docs/schedules.md)."""

from runtime.schedules.admin import ScheduleInfo, Schedules
from runtime.schedules.scheduler import Firing, Scheduler
from runtime.schedules.spec import Schedule, ScheduleError
from runtime.schedules.store import ScheduleStore
from runtime.schedules.timing import firing_run_id

__all__ = [
    "Firing",
    "Schedule",
    "ScheduleError",
    "ScheduleInfo",
    "ScheduleStore",
    "Scheduler",
    "Schedules",
    "firing_run_id",
]
