"""``agentlog erase --subject`` (and ``--run`` of a run sealed under its subject's key) refuses while
a run sealed under that key has not ended -- one running, one a checkpoint lists as active, one
submitted but not started yet -- naming them; on the in-memory log (runtime.sealed_runs)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.erasure import ErasureRefused, erase_run, erase_subject
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import PartitionCheckpoint
from runtime.log.schemas.serde import Serde
from runtime.sealed_runs import NOT_STARTED, unended_runs
from runtime.worker.loop import Worker
from support.erasure_apps import app
from support.wait import wait_until

pytestmark = pytest.mark.unit

SETTINGS = Settings(partitions=2, seal_contents=True)


class Deployment:
    def __init__(self, *, worker: bool = True, checkpoint_interval_s: float = 3600) -> None:
        self.log = MemoryLog(SETTINGS)
        self.serde = Serde.offline(SETTINGS)
        self.worker: Worker | None = None
        if worker:
            self.worker = Worker(
                app,
                SETTINGS,
                log=self.log,
                serde=self.serde,
                worker_id="w",
                checkpoint_interval_s=checkpoint_interval_s,
            )
            server = self.worker
            self.thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
            self.thread.start()
        self.client = Client(SETTINGS, identity="t", log=self.log, serde=Serde.offline(SETTINGS))

    def close(self) -> None:
        self.client.close()
        if self.worker is not None:
            self.worker.stop()
            self.thread.join(timeout=10)


@pytest.fixture
def memory() -> Iterator[Deployment]:
    d = Deployment()
    yield d
    d.close()


def wait_for(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    wait_until(condition, timeout, what, interval=0.02)


def test_a_subject_with_a_running_run_refuses_erasure_naming_it(memory: Deployment) -> None:
    done = memory.client.submit("intake", {"note": "a"}, subject="customer-7").run_id
    memory.client.run(done).result(timeout=20)
    waiting = memory.client.submit("intake", {"note": "b", "wait": True}, subject="customer-7").run_id
    other = memory.client.submit("intake", {"note": "c", "wait": True}, subject="customer-8")
    wait_for(lambda: memory.client.run(waiting).status().status == "running", "the waiting run running")
    wait_for(lambda: other.status().status == "running", "the other subject's run running")
    with pytest.raises(ErasureRefused) as refused:
        erase_subject(memory.client, "customer-7")
    assert str(refused.value) == (
        f"data subject 'customer-7' has runs that have not ended: {waiting} (running); only a subject "
        "whose runs have all ended can be erased (cancel them first: `agentlog cancel RUN`)"
    )
    # --run of the ended run would destroy the same key: refused too, naming the run that goes on
    with pytest.raises(
        ErasureRefused, match=f"which runs that have not ended share: {waiting} \\(running\\)"
    ):
        erase_run(memory.client, done)
    memory.client.run(waiting).signal("go", None)
    memory.client.run(waiting).result(timeout=20)
    assert erase_subject(memory.client, "customer-7") == "subject/customer-7"
    assert memory.client.run(done).status().result == "erased"


def test_a_run_a_checkpoint_lists_as_active_is_found_through_it() -> None:
    memory = Deployment(checkpoint_interval_s=0.05)
    try:
        waiting = memory.client.submit("intake", {"note": "b", "wait": True}, subject="customer-9").run_id
        partition = memory.client.run(waiting).partition

        def listed() -> bool:
            for record in memory.log.read(SETTINGS.checkpoints_topic, partition):
                if record.key == f"checkpoint/{partition}".encode() and record.value is not None:
                    checkpoint = memory.serde.decode(record.value)
                    if isinstance(checkpoint, PartitionCheckpoint) and waiting in checkpoint.active_runs:
                        return checkpoint.covered_offset > checkpoint.active_runs[waiting]
            return False

        wait_for(listed, "a checkpoint listing the waiting run as active, past its RunStarted")
        assert [(r.run_id, r.status) for r in unended_runs(memory.client, "subject/customer-9")] == [
            (waiting, "running")
        ]
    finally:
        memory.close()


def test_a_submission_no_worker_has_started_refuses_erasure() -> None:
    memory = Deployment(worker=False)
    try:
        queued = memory.client.submit("intake", {"note": "q"}, subject="customer-5").run_id
        memory.client.flush()
        with pytest.raises(ErasureRefused, match=f"{queued} \\({NOT_STARTED}\\)"):
            erase_subject(memory.client, "customer-5")
        assert unended_runs(memory.client, "subject/customer-6") == []
    finally:
        memory.close()
