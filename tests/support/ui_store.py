"""A store filled by real runs, for the UI's browser tests and the diff tests.

The refund agent (examples/refund_agent.py) runs 40 steps on a real worker that is SIGKILLed
while step 31's model call is under way; a second worker takes the partition over (a new epoch)
and finishes the run, with step 31's call in doubt. A reset of that run from step 21's model
call (position 41) gives a second run that shares the first 20 steps and then decides
differently (the scripted planner draws a fresh nonce per call): the pair the diff page compares.
The sink copies all of it into an embedded chDB store and keeps running, so every reader goes
through its query port, as a UI next to a live sink does.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.client import Client
from runtime.config import Settings
from support.refund_world import scheduled_in_log
from support.services import ROOT, deployment_env
from support.sink import SinkProcess, kafka_offsets, wait_for_rows
from support.wait import stop_process, wait_until
from support.workers import WorkerProcess

REFUND_APP = "examples.refund_agent:app"
CRASH_STEP = 31
RESET_POSITION = 41  # step 21's model call (step s: model at 2s-1, tool at 2s)


@dataclass
class FilledStore:
    dsn: str
    sink: SinkProcess
    crashed_run: str  # refund-40, its worker killed at step 31
    reset_run: str  # the crashed run reset to RESET_POSITION: same first 20 steps, then other decisions
    first_epoch: int
    second_epoch: int


def _model_calls_at(db_path: Path, step: int) -> int:
    if not db_path.exists():
        return 0
    with sqlite3.connect(db_path, timeout=30) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM model_calls WHERE step = ?", (step,)).fetchone()[0])
        except sqlite3.OperationalError:  # the worker has not created its tables yet
            return 0


def fill_refund_store(deployment: Settings, workers: list[WorkerProcess], tmp_path: Path) -> FilledStore:
    """Run refund-40 with a crash at step 31, reset it at step 21, sink all of it into a chDB store."""
    db_path = tmp_path / "world.db"
    env = {"REFUND_WORLD_DB": str(db_path), "REFUND_HANG_AT_STEP": str(CRASH_STEP)}
    first = WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1.log", **env)
    workers.append(first)
    first_epoch = first.wait_ready(deployment.partitions)
    client = Client(deployment)
    try:
        run_id = client.submit("refund", {"order": "48211"}).run_id
        client.flush()
        wait_until(
            lambda: _model_calls_at(db_path, CRASH_STEP) == 1,
            90,
            f"step {CRASH_STEP}'s model call to start",
            process=first.proc,
            detail=first.log_tail,
        )
        # The call starts before its Scheduled record is acknowledged: only once it is durable does
        # a kill leave exactly that call in doubt.
        partition = client.run(run_id).partition
        wait_until(
            lambda: scheduled_in_log(first.reader, partition, run_id, 2 * CRASH_STEP - 1),
            30,
            f"step {CRASH_STEP}'s Scheduled record",
        )
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        second = WorkerProcess(deployment, REFUND_APP, "w2", tmp_path / "w2.log", **env)
        workers.append(second)
        client.run(run_id).result(timeout=90)
        second_epoch = second.wait_ready(deployment.partitions)[client.run(run_id).partition]
        partition = client.run(run_id).partition
        reset_run = client.run(run_id).reset(RESET_POSITION).run_id
        client.flush()
        client.run(reset_run).result(timeout=90)
    finally:
        client.close()

    dsn = f"chdb://{tmp_path / 'store'}"
    sink = SinkProcess(deployment, dsn, tmp_path / "sink.log")
    records = sum(len(offsets) for offsets in kafka_offsets(deployment).values())
    wait_for_rows(dsn, deployment.events_topic, records, proc=sink.proc)
    return FilledStore(
        dsn=dsn,
        sink=sink,
        crashed_run=run_id,
        reset_run=reset_run,
        first_epoch=first_epoch[partition],
        second_epoch=second_epoch,
    )


class UiProcess:
    """``agentlog ui`` as a real subprocess on a port of this project's test range."""

    def __init__(self, settings: Settings, dsn: str, log_path: Path, port: int, **env: str) -> None:
        self.port = port
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "ui", "--dsn", dsn, "--port", str(port)],
            cwd=ROOT,
            env=deployment_env(settings, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: "serving" in log_path.read_text(errors="replace"),
            60,
            "agentlog ui to serve",
            process=self.proc,
            detail=self.log_tail,
        )

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


def free_port(first: int = 25200, last: int = 25999) -> int:
    """A port of this project's test range that nothing listens on.

    Each pytest-xdist worker scans its own slice of the range: two workers scanning the same ports
    from the same start would both find the first free one, and the second to bind would fail.
    """
    first, last = _this_workers_slice(first, last)
    for port in range(first, last + 1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {first}-{last}")


def _this_workers_slice(first: int, last: int) -> tuple[int, int]:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    width = (last - first + 1) // max(workers, 1)
    if width < 1:
        return first, last
    start = first + (index % workers) * width
    return start, start + width - 1
