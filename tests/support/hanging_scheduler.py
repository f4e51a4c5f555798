"""A scheduler process that stops for good right after its ``HANG_AFTER``-th submission is
acknowledged and before it records that fire time as handled -- the moment a SIGKILL "mid-fire"
means. It writes the run id it submitted to ``HANG_FILE`` when it gets there, then waits to be
killed. Otherwise it is ``agentlog scheduler``: the same Scheduler, the same submission path.

Run as ``python -m support.hanging_scheduler`` with the deployment's ``AGENTLOG_*`` environment."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from runtime.client import Client
from runtime.config import load_settings
from runtime.schedules import Firing, Scheduler


def main() -> None:
    hang_after = int(os.environ["HANG_AFTER"])
    marker = Path(os.environ["HANG_FILE"])
    submitted = 0
    with Client(load_settings(), identity=os.environ.get("IDENTITY", "hanging")) as client:

        def submit(run_id: str, workflow: str, input_json: str) -> None:
            nonlocal submitted
            client.submit(workflow, None, run_id=run_id, raw_input=input_json)
            client.flush()
            submitted += 1
            if submitted >= hang_after:
                marker.write_text(run_id)
                threading.Event().wait()  # until SIGKILL: the fire time is never recorded by this one

        def told(firing: Firing) -> None:
            print(json.dumps({"schedule": firing.schedule, "fire_time": firing.fire_time}), flush=True)

        Scheduler(client.schedules.store, submit).run(threading.Event(), on_fire=told)


if __name__ == "__main__":
    main()
