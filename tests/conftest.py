"""Fixtures that reach the real services started by `agentlog infra up` (see the Makefile).

A missing service fails the session: these tests never skip because Kafka is not there.
Each test that runs workers gets a deployment of its own -- fresh topics, its own consumer
group, schemas registered under its topics' subjects -- so tests cannot see each other's runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.deployment import environment, scratch_deployment
from runtime.config import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def services() -> Settings:
    settings = load_settings()
    host, _, port = settings.bootstrap_servers.split(",")[0].rpartition(":")
    if not _reachable(host, int(port)):
        pytest.fail(
            f"Kafka is not reachable at {settings.bootstrap_servers}: run `agentlog infra up` (make test does)"
        )
    try:
        httpx.get(f"{settings.schema_registry_url}/subjects", timeout=5).raise_for_status()
    except httpx.HTTPError as error:
        pytest.fail(f"schema registry not reachable at {settings.schema_registry_url}: {error}")
    return settings


def make_deployment(base: Settings, partitions: int = 3) -> Settings:
    return scratch_deployment(base, partitions)


@pytest.fixture
def deployment(services: Settings) -> Settings:
    """Fresh topics (3 partitions), a consumer group and registered schemas for one test."""
    return make_deployment(services)


def deployment_env(settings: Settings, **extra: str) -> dict[str, str]:
    return environment(settings, f"{ROOT}{os.pathsep}{ROOT / 'tests'}", **extra)


class WorkerProcess:
    """`agentlog worker` as a real subprocess; its log is kept for assertions."""

    def __init__(
        self, settings: Settings, app: str, worker_id: str, log_path: Path, *args: str, **env: str
    ) -> None:
        self.log_path = log_path
        self.worker_id = worker_id
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
            cwd=ROOT,
            env=deployment_env(settings, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None and text not in self.log():
                raise AssertionError(
                    f"worker {self.worker_id} exited ({self.proc.returncode}) before {text!r}:\n{self.log()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {self.worker_id}: no {text!r} within {timeout}s:\n{self.log()[-3000:]}"
                )
            time.sleep(0.05)

    def wait_ready(self, partitions: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.log().count('"partition_taken"') < partitions:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {self.worker_id} did not take {partitions} partitions:\n{self.log()[-3000:]}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Collects the worker processes a test starts and stops every one of them afterwards."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """Fail a test that leaves non-daemon threads running (they would leak into later tests)."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5
    while True:
        leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"threads left behind: {[t.name for t in leaked]}"
