"""A scheduler's loop over a client (``agentlog scheduler``), and the same in a thread beside a
worker (``agentlog worker --schedules``)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable

from runtime.client import Client
from runtime.config import Settings
from runtime.worker.resources import FATAL_EXIT_CODE

log = logging.getLogger("agentlog.scheduler")


def fire_through(client: Client, workflows: set[str] | None, stop: threading.Event) -> None:
    """Fire ``client``'s schedules until ``stop`` is set, printing each firing as a JSON line."""
    from runtime.schedules import Firing, Scheduler

    schedules = client.schedules
    schedules.list()  # the topic exists, or one line saying how to make it

    def submit(run_id: str, workflow: str, input_json: str) -> None:
        client.submit(workflow, None, run_id=run_id, raw_input=input_json)
        client.flush()  # acknowledged before the fire time is recorded as handled

    def told(firing: Firing) -> None:
        what = f"refused: {firing.refused}" if firing.refused else firing.run_id
        line = {"schedule": firing.schedule, "fire_time": firing.fire_time, "run": what}
        print(json.dumps(line), flush=True)

    Scheduler(schedules.store, submit, workflows=workflows).run(stop, on_fire=told)


def start_beside_worker(settings: Settings, worker_id: str, workflows: set[str]) -> Callable[[], None]:
    """``agentlog worker --schedules``: a scheduler in a thread of the worker's process, with a
    client of its own; returns what stops it. Every worker started so fires every fire time: the
    derived run ids make that one run each (runtime.schedules.scheduler)."""
    client = Client(settings, identity=f"scheduler-{worker_id}")
    stop = threading.Event()

    def run() -> None:
        try:
            fire_through(client, workflows, stop)
        except Exception as error:  # a worker that was to fire schedules and cannot must not run on silent
            log.exception("the scheduler beside worker %s stopped", worker_id)
            log.error(json.dumps({"event": "worker_exiting", "why": f"its scheduler stopped: {error}"}))
            # As the resource watch does: a worker's exit is a crash it recovers from by design, and its
            # supervisor restarts it with its scheduler; firings are derived, so none is lost or doubled.
            os._exit(FATAL_EXIT_CODE)

    thread = threading.Thread(target=run, name="agentlog-scheduler", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=10)
        client.close()

    return halt
