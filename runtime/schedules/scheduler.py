"""The scheduler: reads the schedules, and submits a run for each fire time that is due.

Order of one firing, which is what makes it start exactly one run:
1. the run id is derived from the schedule's name and the fire time (``firing_run_id``);
2. the run is submitted as any run is, and the submission's ack awaited (``submit``);
3. ``ScheduleFired`` (the fire time handled) is written to the schedules topic and its ack awaited.
A scheduler killed between 2 and 3 leaves the fire time due: the next scheduler to look (another
one already running, or this one restarted) submits it again, under the same run id, and the
worker ignores a submission of a run id its partition already knows. Two schedulers running at
once both submit each fire time; one run starts. So any number of schedulers may run: there is
nothing to elect, and what was fired survives a restart because it is read back from the topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from runtime.errors import RetryableError
from runtime.schedules.store import ScheduleStore
from runtime.schedules.timing import MAX_CATCH_UP, ON_TIME_MS, due_firings, firing_run_id, next_fire_time

log = logging.getLogger("agentlog.scheduler")

# (run id, workflow, input JSON): submits the run and returns once the submission is acknowledged.
Submit = Callable[[str, str, str], None]
TICK_S = 0.5  # the longest a scheduler sleeps between reads of the schedules topic


@dataclass(frozen=True)
class Firing:
    schedule: str
    fire_time: int  # ms since the epoch
    run_id: str
    refused: str | None = None


class Scheduler:
    """Fires the due schedules of ``store`` through ``submit``. ``workflows``: the workflows the app
    registers, when known -- a firing of any other is refused (recorded with the reason, nothing
    submitted); None submits every firing and leaves an unknown workflow to the worker, which
    rejects the run with the reason (``agentlog status <run id>``)."""

    def __init__(
        self,
        store: ScheduleStore,
        submit: Submit,
        *,
        workflows: Collection[str] | None = None,
        clock: Callable[[], float] = time.time,
        on_time_ms: int = ON_TIME_MS,
        max_catch_up: int = MAX_CATCH_UP,
    ) -> None:
        self.store, self.submit, self.workflows, self.clock = store, submit, workflows, clock
        self.on_time_ms, self.max_catch_up = on_time_ms, max_catch_up

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def tick(self) -> list[Firing]:
        """Read the schedules and fire what is due now; the firings, in the order fired."""
        self.store.refresh()
        now = self.now_ms()
        fired: list[Firing] = []
        for name, schedule in sorted(self.store.schedules().items()):
            last = self.store.last_fired(name)
            due = due_firings(
                schedule,
                None if last is None else last.fire_time,
                now,
                on_time_ms=self.on_time_ms,
                max_catch_up=self.max_catch_up,
            )
            for fire_ms in due:
                fired.append(self._fire(name, schedule.workflow, schedule.input, fire_ms))
        return fired

    def _fire(self, name: str, workflow: str, input_json: str, fire_ms: int) -> Firing:
        run_id = firing_run_id(name, fire_ms)
        refused = None
        if self.workflows is not None and workflow not in self.workflows:
            refused = f"unknown workflow {workflow!r} (registered: {', '.join(sorted(self.workflows))})"
            log.warning("schedule %s: fire time %s refused: %s", name, fire_ms, refused)
        else:
            self.submit(run_id, workflow, input_json)
            log.info("schedule %s: fired %s", name, run_id)
        self.store.record_fired(
            name, fire_ms, "" if refused else run_id, now_ms=self.now_ms(), refused=refused
        )
        return Firing(name, fire_ms, run_id, refused)

    def seconds_to_next(self) -> float:
        """How long until the next fire time of an active schedule, at most ``TICK_S``."""
        now = self.now_ms()
        upcoming = [
            next_fire_time(s, max(now, s.active_from))
            for s in self.store.schedules().values()
            if not s.paused
        ]
        if not upcoming:
            return TICK_S
        return min(TICK_S, max(0.0, (min(upcoming) - now) / 1000))

    def run(self, stop: threading.Event, on_fire: Callable[[Firing], None] | None = None) -> None:
        """Tick until ``stop`` is set; ``on_fire`` is told of each firing."""
        while not stop.is_set():
            try:
                firings = self.tick()
            except RetryableError as error:  # the log or the registry blinked: what is due stays due
                log.warning("scheduler: %s; trying again in %s s", error, TICK_S)
                stop.wait(TICK_S)
                continue
            for firing in firings:
                if on_fire is not None:
                    on_fire(firing)
            stop.wait(self.seconds_to_next() + 0.005)  # a little past the fire time: it is then due
