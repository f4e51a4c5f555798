"""A worker SIGKILLed in the middle of a run's compensations: the next worker resumes the unwind
where the log says it was. Completed effects and compensations are not run again; the one in
flight at the kill is executed again with its recorded idempotency key (in doubt), so the service
applies it once; the run ends failed, with both compensations completed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.workflow.compensation import compensation_key
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.chaos

APP = "support.ops_apps:app"


def seen(folder: Path, service: str) -> list[str]:
    """The idempotency keys the scripted service ``service`` was called with, in order."""
    path = folder / service
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("kill_in", ["release_stock", "reverse_refund"])
def test_a_worker_killed_while_compensating_resumes_the_unwind_running_nothing_twice(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, kill_in: str
) -> None:
    counters = str(tmp_path)
    first = WorkerProcess(
        deployment, APP, "w1", tmp_path / "w1.log", TEST_COUNTER_DIR=counters, HANG_IN=kill_in
    )
    workers.append(first)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    run = client.submit("refund_saga", {"order": "48211"})
    client.flush()
    wait_until(
        lambda: seen(tmp_path, kill_in), 60, f"{kill_in} to start", process=first.proc, detail=first.log_tail
    )
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    assert run.status().status == "running"

    second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", TEST_COUNTER_DIR=counters)
    workers.append(second)
    status = wait_until(
        lambda: (s := run.status()).status != "running" and s,
        60,
        "the run to end after the restart",
        process=second.proc,
        detail=second.log_tail,
    )
    assert status.status == "failed"
    assert status.reason is not None and "no courier for order 48211" in status.reason

    refund, reserve = seen(tmp_path, "issue_refund"), seen(tmp_path, "reserve_stock")
    release, reverse = seen(tmp_path, "release_stock"), seen(tmp_path, "reverse_refund")
    assert len(refund) == 1 and len(reserve) == 1  # the effects ran once: replay served them
    # Each compensation keyed from the effect it undoes; the one killed in flight was called again
    # with its recorded key (a service deduplicates on it), the other exactly once.
    assert set(release) == {compensation_key(reserve[0], "release_stock")}
    assert set(reverse) == {compensation_key(refund[0], "reverse_refund")}
    assert (len(release), len(reverse)) == ((2, 1) if kill_in == "release_stock" else (1, 2))
    assert [(c.tool, c.compensates, c.state) for c in status.compensations] == [
        ("release_stock", 2, "completed"),
        ("reverse_refund", 1, "completed"),
    ]
    (doubt,) = status.in_doubt
    assert (doubt.name, doubt.idempotency_key) == (
        kill_in,
        (release if kill_in == "release_stock" else reverse)[0],
    )
    client.close()
