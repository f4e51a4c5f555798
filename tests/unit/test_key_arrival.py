"""A sealed submission read before its data key, on the in-memory log: the worker holds the command
and fetches the key off its event loop -- the runs beside it keep stepping, the commands behind it in
its partition wait in order -- then starts it once the key is there; a key that never comes ends the
submission as RunRejected naming the run and the key, and the partition goes on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.erasure import erase_run
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import RunRejected, RunStarted, ToolCallCompleted
from runtime.log.schemas.serde import Serde
from runtime.worker import commands
from runtime.worker.loop import Worker
from support.erasure_apps import app
from support.late_keys import LateKeySubmission
from support.wait import wait_until

pytestmark = pytest.mark.unit

SETTINGS = Settings(
    partitions=1, seal_contents=True
)  # one partition: the held run and its neighbours share it


class Deployment:
    def __init__(self) -> None:
        self.log = MemoryLog(SETTINGS)
        self.serde = Serde.offline(SETTINGS)
        self.worker = Worker(
            app, SETTINGS, log=self.log, serde=self.serde, worker_id="w", checkpoint_interval_s=3600
        )
        self.thread = threading.Thread(target=lambda: asyncio.run(self.worker.serve()), daemon=True)
        self.thread.start()
        # A client of its own (its own key store): what the worker knows of keys it reads from the log.
        self.client = Client(SETTINGS, identity="t", log=self.log, serde=Serde.offline(SETTINGS))

    def events(self, run_id: str) -> list[object]:
        return [
            self.serde.decode(r.value)
            for r in self.log.read(SETTINGS.events_topic, 0)
            if r.key == run_id.encode()
        ]

    def count(self, run_id: str, kind: type) -> int:
        return sum(isinstance(e, kind) for e in self.events(run_id))

    def send(self, late: LateKeySubmission) -> None:
        self.log.append(SETTINGS.commands_topic, late.partition, late.run_id.encode(), late.command).result(5)

    def close(self) -> None:
        self.client.close()
        self.worker.stop()
        self.thread.join(timeout=10)


@pytest.fixture
def memory() -> Iterator[Deployment]:
    d = Deployment()
    yield d
    d.close()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    wait_until(condition, timeout, what, interval=0.01)


def test_a_submission_read_before_its_key_waits_while_the_runs_beside_it_step(memory: Deployment) -> None:
    ticking = memory.client.submit("ticks", {"count": 60}).run_id
    wait_for(lambda: memory.count(ticking, ToolCallCompleted) >= 1, "the ticking run's first step")
    late = LateKeySubmission(SETTINGS, memory.serde, "late-run", "intake", {"note": "hello", "wait": True})
    memory.send(late)
    wait_for(lambda: bool(memory.worker.owned[0].held), "the late submission held")
    signal = late.signal("go", None)  # behind the held submission, for the same run
    memory.log.append(SETTINGS.commands_topic, late.partition, late.run_id.encode(), signal).result(5)
    steps = memory.count(ticking, ToolCallCompleted)
    # While the submission waits for its key, the run beside it keeps stepping, on the log.
    wait_for(lambda: memory.count(ticking, ToolCallCompleted) >= steps + 3, "the ticking run stepping")
    assert memory.events(late.run_id) == []
    memory.log.append(SETTINGS.keys_topic, late.partition, late.run_id.encode(), late.key).result(5)
    result = memory.client.run(late.run_id).result(timeout=20)
    assert result["filed"] == "hello"  # its input opened, and the signal queued behind it was applied
    started = next(e for e in memory.events(late.run_id) if isinstance(e, RunStarted))
    assert started.input == '{"note":"hello","wait":true}'
    assert memory.client.run(ticking).result(timeout=20) == 60


def test_a_submission_whose_key_never_comes_is_rejected_and_the_partition_goes_on(
    memory: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "KEY_ARRIVAL_TIMEOUT", 0.3)
    late = LateKeySubmission(SETTINGS, memory.serde, "keyless-run", "intake", {"note": "lost"})
    memory.send(late)
    after = memory.client.submit("intake", {"note": "after"})
    assert after.result(timeout=20)["filed"] == "after"
    (rejected,) = memory.events(late.run_id)
    assert isinstance(rejected, RunRejected)
    assert f"run {late.run_id}: its data key '{late.run_id}' is not in the keys topic" in rejected.reason
    status = memory.client.run(late.run_id).status()
    assert status.status == "rejected"


def test_a_resubmission_of_an_erased_ended_run_is_ignored_and_it_still_reads_erased(
    memory: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "KEY_ARRIVAL_TIMEOUT", 0.3)
    run_id = memory.client.submit("intake", {"note": "secret"}).run_id
    memory.client.run(run_id).result(timeout=20)
    erase_run(memory.client, run_id)
    command = next(r for r in memory.log.read(SETTINGS.commands_topic, 0) if r.key == run_id.encode())
    memory.log.append(SETTINGS.commands_topic, 0, command.key, command.value).result(5)  # sent again
    after = memory.client.submit("intake", {"note": "after"})
    after.result(timeout=20)
    assert memory.count(run_id, RunRejected) == 0
    assert memory.client.run(run_id).status().result == "erased"
