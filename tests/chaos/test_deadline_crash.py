"""Deadlines are durable timers (runtime.workflow.deadlines): runs waiting for a signal under a 5 s
workflow deadline, in a worker whose run cache holds one run (the others are evicted as they wait),
their worker killed with SIGKILL
before the deadline; the worker that takes the partitions over cancels each at its deadline, each
cleanup call runs once and each compensation applies once (a SQLite row per key)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

APP = "support.cancel_apps:app"
RUNS = 3


def test_deadlines_fire_after_a_kill_and_an_eviction(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    def worker(worker_id: str) -> WorkerProcess:
        started = WorkerProcess(
            deployment,
            APP,
            worker_id,
            tmp_path / f"{worker_id}.log",
            TEST_COUNTER_DIR=str(tmp_path),
            AGENTLOG_RUN_CACHE_SIZE="1",  # two of the three runs wait evicted: their deadline kept by id
        )
        workers.append(started)
        return started

    first = worker("w1")
    first.wait_ready(deployment.partitions)
    with Client(deployment) as client:
        runs = [client.submit("booked_then_waits", {"seat": f"S{n}"}).run_id for n in range(RUNS)]

        def booked() -> bool:
            if not (tmp_path / "world.db").exists():
                return False
            with sqlite3.connect(tmp_path / "world.db") as db:
                applied = db.execute("SELECT count(*) FROM effects WHERE tool = 'book'").fetchone()[0]
            # The booking applied and recorded (no call in doubt): each run is in its signal wait, so the
            # deadline reaches the wait (and its cleanup), not a booking re-run after the takeover.
            return applied == RUNS and not any(client.run(run).status().in_doubt for run in runs)

        wait_until(booked, 30, "every run to book its seat", process=first.proc, detail=first.log_tail)
        assert not (tmp_path / "cleanup").exists()  # killed before any deadline
        first.kill()
        second = worker("w2")

        def ended() -> list[str] | None:
            states = [client.run(run).status().status for run in runs]
            return states if all(s not in ("running", "unknown") for s in states) else None

        assert (
            wait_until(ended, 90, "the runs to end", process=second.proc, detail=second.log_tail)
            == ["cancelled"] * RUNS
        )
        reasons = [client.run(run).status().reason or "" for run in runs]
        assert all(reason.startswith("deadline ") and reason.endswith(" passed") for reason in reasons)
    cleanups = Counter((tmp_path / "cleanup").read_text().splitlines())
    assert cleanups == Counter(reasons)  # each run's cleanup once, with its own deadline
    with sqlite3.connect(tmp_path / "world.db") as db:
        rows = Counter(tool for (tool,) in db.execute("SELECT tool FROM effects"))
    assert rows == {"book": RUNS, "unbook": RUNS}
