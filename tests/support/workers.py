"""``agentlog worker`` as a real subprocess, observed through the log it writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from infra.deployment import environment
from runtime.config import Settings
from support.events import LogReader
from support.services import ROOT, TESTS, deployment_env
from support.wait import stop_process, wait_until

APP = "support.agent_apps:app"  # the scripted workflows of tests/support/agent_apps.py


class WorkerProcess:
    """A worker subprocess. Its output goes to ``log_path``, kept for the messages of failed
    assertions (``log_tail``); what the tests check is what the worker wrote to the log."""

    def __init__(
        self,
        settings: Settings,
        app: str,
        worker_id: str,
        log_path: Path,
        *args: str,
        code: Path | None = None,
        **env: str,
    ) -> None:
        """``code``: the root of another copy of the code to run (its ``runtime/`` and ``schemas/``
        come first on the path, the process starts in it); default this checkout."""
        self.settings = settings
        self.log_path = log_path
        self.worker_id = worker_id
        self.reader = LogReader(settings)
        self.started_from = self.reader.ends()  # its claims come after these offsets
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime.cli",
                "worker",
                "--app",
                app,
                "--worker-id",
                worker_id,
                "--session-timeout-ms",
                env.pop("SESSION_TIMEOUT_MS", "6000"),
                *args,
            ],
            cwd=code or ROOT,
            env=deployment_env(settings, **env)
            if code is None
            else environment(settings, os.pathsep.join((str(code), str(TESTS), str(ROOT))), **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the worker's output, for failure messages only."""
        return (
            f"--- {self.log_path.name} (worker {self.worker_id}) ---\n"
            + self.log_path.read_text(errors="replace")[-chars:]
        )

    def claimed(self) -> dict[int, int]:
        """Partition -> epoch of the partitions this worker claimed since it started."""
        return self.reader.claimed_by(self.worker_id, self.started_from)

    def wait_ready(self, partitions: int, timeout: float = 30.0) -> dict[int, int]:
        """Until the events topic holds this worker's ``EpochClaimed`` on ``partitions`` partitions."""
        return wait_until(
            lambda: claimed if len(claimed := self.claimed()) >= partitions else None,
            timeout,
            f"worker {self.worker_id} to claim {partitions} partitions",
            interval=0.1,
            process=self.proc,
            detail=self.log_tail,
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()
        self.reader.close()


def child_pids(pid: int) -> list[int]:
    """The live (not zombie) children of ``pid``, from /proc."""
    children: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, parent = fields[0], int(fields[1])
        if parent == pid and state != "Z":
            children.append(int(stat.parent.name))
    return sorted(children)


def start_worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, worker_id: str = "w1", **env: str
) -> WorkerProcess:
    """A worker of ``support.agent_apps`` whose scripted fakes keep their counters in ``tmp_path``."""
    worker = WorkerProcess(
        deployment,
        APP,
        worker_id,
        tmp_path / f"{worker_id}-{len(workers)}.log",
        TEST_COUNTER_DIR=str(tmp_path),
        **env,
    )
    workers.append(worker)
    return worker
