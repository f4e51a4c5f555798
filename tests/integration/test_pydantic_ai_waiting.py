"""A thousand PydanticAI runs waiting on one worker started with a 256-descriptor limit: a waiting
framework run holds no thread and no descriptor (runtime.integrations.bridge), so the worker serves
them all -- its threads and descriptors stay few while they wait -- and every run completes after
its signal, each effect once."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.events import LogReader
from support.wait import wait_until
from support.waiting_apps import APPROVAL
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

RUNS = 1000
DESCRIPTORS = 256  # a thread and an event loop per waiting run would need ~3,000


def _threads_and_descriptors(pid: int) -> tuple[int, int]:
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


class _Counter:
    """Counts one event type in the events topic as it grows, reading each record once (a re-read of
    the whole topic every second would cost the suite more CPU than the runs do)."""

    def __init__(self, reader: LogReader, settings: Settings, event_type: str) -> None:
        self.reader, self.event_type = reader, event_type
        self.next = dict.fromkeys(range(settings.partitions), 0)
        self.seen = 0

    def __call__(self) -> int:
        for partition, start in self.next.items():
            events = self.reader.events(partition, start)
            self.seen += sum(1 for _, event in events if event.type == self.event_type)
            if events:
                self.next[partition] = events[-1][0] + 1
        return self.seen


@pytest.mark.timeout(420)  # ~50 s alone; the bound is for a loaded machine
def test_a_thousand_waiting_pydantic_ai_runs_fit_in_256_descriptors_and_all_complete(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = WorkerProcess(
        deployment,
        "support.waiting_apps:app",
        "waiter",
        tmp_path / "waiter.log",
        TEST_COUNTER_DIR=str(tmp_path),
    )
    workers.append(worker)
    pid = worker.proc.pid
    # Lowered before the worker opens its clients (it imports for a second first); no run needs more.
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))
    worker.wait_ready(deployment.partitions)
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert any(
        line.startswith("Max open files") and f" {DESCRIPTORS} " in line for line in limits.splitlines()
    )

    client = Client(deployment)
    reader = LogReader(deployment)
    try:
        run_ids = [client.submit("procure", {"item": "laptop"}, run_id=f"P-{n}").run_id for n in range(RUNS)]
        client.flush()
        # each run has its quote and the answer asking for approval (2 model calls): it waits
        answered = _Counter(reader, deployment, "ModelCallCompleted")
        wait_until(
            lambda: answered() >= 2 * RUNS,
            180,  # ~25 s alone; a liveness bound under a loaded suite, not a speed claim
            f"{RUNS} runs waiting for their approval",
            interval=1.0,
            process=worker.proc,
            detail=worker.log_tail,
        )
        threads, descriptors = _threads_and_descriptors(pid)
        assert threads < 50 and descriptors < 200, (threads, descriptors)
        assert not list(tmp_path.glob("order-*"))  # nothing ordered before its approval

        for run_id in run_ids:
            client.run(run_id).signal("approval", APPROVAL)
        results = client.results(run_ids, timeout=180)
        assert all(result == {"answer": "ordered"} for result in results.values()), results
        assert len(results) == RUNS
        orders = [int(path.read_text()) for path in tmp_path.glob("order-*")]
        assert len(orders) == RUNS and set(orders) == {1}  # each run's effect once
        threads, descriptors = _threads_and_descriptors(pid)
        assert threads < 50 and descriptors < 200, (threads, descriptors)
        assert worker.proc.poll() is None, worker.log_tail()
    finally:
        reader.close()
        client.close()
