"""Continue-as-new survives a SIGKILL between the end of the old run and the start of the new one.

The worker is stopped at that point by ``CONTINUE_HANG`` (tests/support/continue_apps.py), which
writes a file when it gets there; the test waits for the old run's RunContinuedAsNew in the log
and that file, then kills the worker with SIGKILL. A restarted worker starts the successor once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.reader import read_partition
from runtime.log.records.events import RunStarted, RunSubmitted
from runtime.log.schemas.serde import Serde
from support.wait import wait_for_event, wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
APP = "support.continue_apps:app"


def records_of(deployment: Settings, topic: str, run_id: str, client: Client) -> list[object]:
    serde = Serde(deployment)
    return [
        serde.decode(r.value, r.key)
        for r in read_partition(deployment, topic, client.run(run_id).partition)
        if r.key == run_id.encode() and r.value
    ]


@pytest.mark.parametrize("hang", ["before", "after"])
def test_a_worker_killed_between_the_old_run_and_the_new_one_starts_the_new_one_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, hang: str
) -> None:
    first = WorkerProcess(
        deployment, APP, "w1", tmp_path / "w1.log", TEST_COUNTER_DIR=str(tmp_path), CONTINUE_HANG=hang
    )
    workers.append(first)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    run_id = client.submit("counter", {"step": 1, "last": 3, "total": 0}).run_id
    client.flush()
    wait_for_event(client, run_id, "RunContinuedAsNew", timeout=60)
    wait_until(
        (tmp_path / "continue-hang").exists,
        30,
        "the worker to reach the crash point",
        process=first.proc,
        detail=first.log_tail,
    )
    first.kill()  # SIGKILL
    successor = client.run(run_id).status().continued_as
    assert successor is not None
    submitted = [
        r
        for r in records_of(deployment, deployment.commands_topic, successor, client)
        if isinstance(r, RunSubmitted)
    ]
    assert len(submitted) == (0 if hang == "before" else 1), submitted
    # before: nothing was submitted; after: the dying worker may have started the successor
    # already (its command was delivered in the same loop turn as the ack) -- or not.
    assert client.run(successor).status().status in (
        ("unknown",) if hang == "before" else ("unknown", "running")
    )

    second = WorkerProcess(deployment, APP, "w2", tmp_path / "w2.log", TEST_COUNTER_DIR=str(tmp_path))
    workers.append(second)
    result = client.run(run_id).result(timeout=90, follow=True)
    assert result == {"total": 60, "steps": 3}, second.log_tail()
    chain = [run_id]
    while (nxt := client.run(chain[-1]).status().continued_as) is not None:
        chain.append(nxt)
    assert len(chain) == 3 and chain[1] == successor
    assert [client.run(r).status().continued_from for r in chain] == [None, *chain[:-1]]
    started = [
        e
        for e in records_of(deployment, deployment.events_topic, successor, client)
        if isinstance(e, RunStarted)
    ]
    assert len(started) == 1, started  # exactly once
    resubmitted = [
        r
        for r in records_of(deployment, deployment.commands_topic, successor, client)
        if isinstance(r, RunSubmitted)
    ]
    # before: the restarted worker's submission is the only one; after: a harmless duplicate
    assert len(resubmitted) == (1 if hang == "before" else 2)
    assert all(r.continued_from == run_id for r in resubmitted)
    assert sorted(p.name for p in tmp_path.glob("work-*")) == ["work-1", "work-2", "work-3"]
    assert (tmp_path / "work-1").read_text() == "1"
    if hang == "before":  # the successor first ran on the restarted worker
        assert all((tmp_path / f"work-{s}").read_text() == "1" for s in (2, 3))
    print(
        f"\n[{hang}] old run {run_id}: continued_as {successor}; after SIGKILL, RunSubmitted x"
        f"{len(resubmitted)} for it, RunStarted x{len(started)}; chain {chain} -> {result}"
    )
    client.close()
