"""A child run survives a SIGKILL at either of its two crash points.

``RunSubmitted``: the parent's ChildRunScheduled is acknowledged and its worker dies before the
child's submission is produced -- the next owner replays the parent and submits the child.
``ChildEnded``: the child's ending is acknowledged and its worker dies before the parent hears of
it -- the next owner reads the ending in its rebuild and sends it again. Either way the child
starts once, its effect runs once, and the parent records its ending once and completes. The
worker is stopped at the point by ``CHILD_HANG`` (tests/support/child_apps.py), which writes a
file there, so the test kills it on a fact, not on time."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import ChildRunEnded, ChildRunScheduled, RunStarted
from runtime.workflow.children import child_run_id
from support.events import LogReader
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
APP = "support.child_apps:app"


@pytest.mark.parametrize("hang", ["RunSubmitted", "ChildEnded"])
def test_a_worker_killed_between_a_record_and_its_message_starts_and_reports_the_child_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, hang: str
) -> None:
    db, hang_file = tmp_path / "effects.db", tmp_path / "hang"
    first = WorkerProcess(
        deployment,
        APP,
        "w1",
        tmp_path / "w1.log",
        CHILD_DB=str(db),
        CHILD_HANG=hang,
        CHILD_HANG_FILE=str(hang_file),
    )
    workers.append(first)
    first.wait_ready(deployment.partitions)
    client = Client(deployment)
    try:
        parent = client.submit("one_child", 4, run_id=f"crash-{hang}").run_id
        child = child_run_id(parent, 1)
        wait_until(
            hang_file.exists,
            30,
            "the worker to reach the crash point",
            process=first.proc,
            detail=first.log_tail,
        )
        first.kill()  # SIGKILL
        assert client.run(child).status().status == ("unknown" if hang == "RunSubmitted" else "completed")
        second = WorkerProcess(deployment, APP, "w2", tmp_path / "w2.log", CHILD_DB=str(db))
        workers.append(second)
        result = client.run(parent).result(timeout=60)
    finally:
        client.close()
    assert result == 41, second.log_tail()
    with LogReader(deployment) as reader:
        events = [e for p in range(deployment.partitions) for _, e in reader.events(p)]
    started = Counter(e.run_id for e in events if isinstance(e, RunStarted))
    scheduled = [e for e in events if isinstance(e, ChildRunScheduled)]
    ended = [e for e in events if isinstance(e, ChildRunEnded)]
    assert started[child] == 1 and len(scheduled) == 1 and len(ended) == 1, (started, scheduled, ended)
    with sqlite3.connect(db) as connection:
        calls = connection.execute("SELECT count(*) FROM calls WHERE run = ?", (child,)).fetchone()[0]
    connection.close()
    assert calls == 1
    print(
        f"\n[{hang}] SIGKILL at the crash point: child {child} RunStarted x{started[child]}, "
        f"effect calls x{calls}, ChildRunEnded x{len(ended)}, parent result {result}"
    )
