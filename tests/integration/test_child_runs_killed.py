"""Child runs on real Kafka with real worker processes, killed with SIGKILL.

A parent gathers three children (each writes one row to SQLite, then waits for a signal). The
parent's worker is killed while the children run, then a child's worker while the parent waits;
each child starts once, its effect runs once, the parent records each ending once and completes.
The parent-close policy: a cancelled parent cancels its ``cancel`` child; its ``run_on`` child
runs to its end."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from analytics import audit
from analytics.store import connect
from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.partitioning import partition_of_key
from runtime.log.records.events import ChildRunEnded, ChildRunScheduled, RunStarted
from runtime.workflow.children import child_run_id
from support.events import LogReader
from support.sink import InProcessSink, scalar
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

APP = "support.child_apps:app"
CHILDREN_DONE = "SELECT count() FROM agentlog.runs WHERE parent_run_id = {p:String} AND status != 'running'"


def start(deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, name: str) -> WorkerProcess:
    worker = WorkerProcess(
        deployment, APP, name, tmp_path / f"{name}.log", CHILD_DB=str(tmp_path / "effects.db")
    )
    workers.append(worker)
    return worker


def owner(reader: LogReader, workers: list[WorkerProcess], partition: int) -> WorkerProcess:
    """The live worker whose claim of ``partition`` is the latest."""
    claims = reader.claims(partition)
    assert claims, f"no claim of partition {partition}"
    name = claims[-1][1].worker
    return next(w for w in workers if w.worker_id == name and w.proc.poll() is None)


def claimed_after(reader: LogReader, partition: int, offset: int, by_not: str) -> bool:
    return any(o > offset and c.worker != by_not for o, c in reader.claims(partition))


def logs(workers: list[WorkerProcess]) -> str:
    return "\n".join(w.log_tail(1500) for w in workers)


def test_three_children_survive_a_killed_parent_worker_and_a_killed_child_worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    for name in ("w1", "w2"):
        start(deployment, workers, tmp_path, name)
    reader = LogReader(deployment)
    client = Client(deployment)
    try:
        wait_until(
            lambda: len(set().union(*(w.claimed() for w in workers))) == deployment.partitions,
            60,
            "the two workers to claim every partition",
            detail=lambda: logs(workers),
        )
        parent = client.submit("fan_out", 3, run_id="parent-kill9").run_id
        children = [child_run_id(parent, p) for p in (1, 2, 3)]
        wait_until(
            lambda: all(client.run(c).status().status == "running" for c in children),
            30,
            "the three children to start",
            detail=lambda: logs(workers),
        )
        # 1. The parent's worker dies while its children run (they wait for "go").
        home = partition_of_key(parent.encode(), deployment.partitions)
        victim = owner(reader, workers, home)
        before = reader.end(home)
        victim.kill()
        start(deployment, workers, tmp_path, "w3")
        wait_until(
            lambda: claimed_after(reader, home, before - 1, victim.worker_id),
            60,
            "the parent's partition to be taken over",
            detail=lambda: logs(workers),
        )
        # 2. A child's worker dies while the parent waits for it.
        child_home = partition_of_key(children[0].encode(), deployment.partitions)
        second = owner(reader, workers, child_home)
        before = reader.end(child_home)
        second.kill()
        start(deployment, workers, tmp_path, "w4")
        wait_until(
            lambda: claimed_after(reader, child_home, before - 1, second.worker_id),
            60,
            "the child's partition to be taken over",
            detail=lambda: logs(workers),
        )
        for child in children:
            client.run(child).signal("go", True)
        result = client.run(parent).result(timeout=60)
    finally:
        client.close()
    assert result == [10, 20, 30]
    events = [e for p in range(deployment.partitions) for _, e in reader.events(p)]
    reader.close()
    starts = Counter(e.run_id for e in events if isinstance(e, RunStarted))
    assert [starts[c] for c in children] == [1, 1, 1], starts
    scheduled = Counter(e.child_run_id for e in events if isinstance(e, ChildRunScheduled))
    ended = Counter(e.child_run_id for e in events if isinstance(e, ChildRunEnded))
    assert [scheduled[c] for c in children] == [1, 1, 1], scheduled
    assert [ended[c] for c in children] == [1, 1, 1], ended
    with sqlite3.connect(tmp_path / "effects.db") as db:
        calls = Counter(run for (run,) in db.execute("SELECT run FROM calls"))
        effects = Counter(run for (run,) in db.execute("SELECT run FROM effects"))
    db.close()
    assert [effects[c] for c in children] == [1, 1, 1], effects
    assert [calls[c] for c in children] == [1, 1, 1], calls  # no effect ran a second time either
    print(
        f"\nkilled {victim.worker_id} (parent) and {second.worker_id} (child {children[0]}): "
        f"RunStarted per child {[starts[c] for c in children]}, tool calls per child "
        f"{[calls[c] for c in children]}, endings recorded per child {[ended[c] for c in children]}"
    )


def test_a_cancelled_parent_cancels_its_cancel_child_and_its_run_on_child_completes(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start(deployment, workers, tmp_path, "w1")
    client = Client(deployment)
    try:
        parent = client.submit("two_policies", 0, run_id="parent-close").run_id
        cancel_child, run_on_child = child_run_id(parent, 1), child_run_id(parent, 2)
        wait_until(
            lambda: (
                client.run(cancel_child).status().status
                == client.run(run_on_child).status().status
                == "running"
            ),
            60,
            "both children to start",
            detail=lambda: logs(workers),
        )
        client.run(parent).cancel("stop the family")
        cancelled = wait_until(
            lambda: (s := client.run(cancel_child).status()).status == "cancelled" and s,
            30,
            "the cancel-policy child to be cancelled",
            detail=lambda: logs(workers),
        )
        assert parent in (cancelled.reason or "")
        assert client.run(parent).status().status == "cancelled"
        assert client.run(run_on_child).status().status == "running"
        client.run(run_on_child).signal("go", True)
        assert client.run(run_on_child).result(timeout=30) == 20
        status = client.run(parent).status()
    finally:
        client.close()
    # The parent's history: it ended before either child's ending reached it.
    assert [(c.run_id, c.status) for c in status.children] == [
        (cancel_child, "running"),
        (run_on_child, "running"),
    ]
    # The audit store lists the tree: each child names its parent.
    dsn = f"chdb://{tmp_path / 'analytics'}"
    with InProcessSink(deployment, dsn):
        wait_until(
            lambda: scalar(dsn, CHILDREN_DONE, {"p": parent}) == 2,
            60,
            "the sink to copy the children's endings",
            interval=0.5,
        )
        with connect(dsn) as store:
            rows = audit.runs(store, parent=parent).rows
    assert sorted((r["run_id"], r["status"], r["parent_run_id"]) for r in rows) == [
        (cancel_child, "cancelled", parent),
        (run_on_child, "completed", parent),
    ]


def test_a_parent_past_its_deadline_is_cancelled_with_its_cancel_child(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """A deadline is a cancel like a client's: the parent's reason names the deadline, and its
    parent-close policy cancels the ``cancel`` child and leaves the ``run_on`` one running."""
    start(deployment, workers, tmp_path, "w1")
    client = Client(deployment)
    try:
        parent = client.submit("two_policies", 0, run_id="parent-deadline", deadline=4).run_id
        cancel_child, run_on_child = child_run_id(parent, 1), child_run_id(parent, 2)
        child = wait_until(
            lambda: (s := client.run(cancel_child).status()).status == "cancelled" and s,
            60,
            "the parent's deadline to cancel its cancel-policy child",
            detail=lambda: logs(workers),
        )
        ended = client.run(parent).status()
        left = client.run(run_on_child).status()
    finally:
        client.close()
    assert ended.status == "cancelled" and "deadline" in (ended.reason or ""), ended
    assert parent in (child.reason or ""), child.reason
    assert left.status == "running"
