"""Heartbeats on real Kafka with worker subprocesses: a long tool's progress survives ``kill -9`` of
its worker (the retry on the next worker starts from the last recorded details, not from zero), and
a tool that stops heart-beating is retried after its heartbeat timeout, not its full timeout.

The tools are in tests/support/heartbeat_apps.py; what each attempt did is a SQLite file the
test reads after the kill."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import (
    Event,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallHeartbeat,
    ToolCallScheduled,
)
from support.services import agentlog
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

APP = "support.heartbeat_apps:app"
ITEMS = 60  # 0.1 s each: an uninterrupted call lasts about 6 s


@pytest.fixture
def client(deployment: Settings) -> Iterator[Client]:
    with Client(deployment) as client:
        yield client


def _worker(deployment: Settings, workers: list[WorkerProcess], tmp_path: Path) -> WorkerProcess:
    worker = WorkerProcess(
        deployment, APP, "w1", tmp_path / f"w1-{len(workers)}.log", TEST_COUNTER_DIR=str(tmp_path)
    )
    workers.append(worker)
    return worker


def _events(client: Client, run_id: str) -> list[Event]:
    return [logged.event for logged in client.run(run_id).events()]


def _beats(client: Client, run_id: str) -> list[ToolCallHeartbeat]:
    return [e for e in _events(client, run_id) if isinstance(e, ToolCallHeartbeat)]


def _rows(tmp_path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(tmp_path / "items.sqlite", timeout=10)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_the_retry_after_kill_9_resumes_from_the_last_heartbeat_not_from_zero(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, client: Client
) -> None:
    first = _worker(deployment, workers, tmp_path)
    first.wait_ready(deployment.partitions)
    run = client.submit("bulk", {"items": ITEMS})
    client.flush()
    # Mid-call: a heartbeat past the first one is in the log (records come at most once a second).
    wait_until(
        lambda: any(json.loads(b.details)["done"] >= 5 for b in _beats(client, run.run_id)),
        60,
        "a heartbeat naming 5 items done",
        process=first.proc,
        detail=first.log_tail,
    )
    (shown,) = run.status().heartbeats  # what `agentlog status` shows of the call in flight
    assert (shown.name, shown.attempt) == ("process_items", 1) and shown.details["done"] >= 5
    printed = agentlog(deployment, "status", run.run_id).stdout
    assert re.search(
        r'heartbeat tool \'process_items\' at position 1: \{"done":\d+\} \(\d+ s ago, attempt 1\)', printed
    ), printed
    first.kill()
    written_before = [item for (item,) in _rows(tmp_path, "SELECT item FROM items ORDER BY item")]

    second = _worker(deployment, workers, tmp_path)
    result = run.result(timeout=60)
    # the last details the log holds of the killed attempt (read once nothing more can land)
    recorded = json.loads([b for b in _beats(client, run.run_id) if b.attempt == 1][-1].details)
    assert 5 <= recorded["done"] <= len(written_before) < ITEMS, (recorded, len(written_before))
    assert result == {"processed": ITEMS, "resumed_from": recorded["done"]}, second.log_tail()

    # The retry read the recorded details and started after them, not from item 1.
    (key,) = {e.idempotency_key for e in _events(client, run.run_id) if isinstance(e, ToolCallScheduled)}
    starts = _rows(tmp_path, "SELECT key, resumed_from FROM starts ORDER BY rowid")
    assert starts == [(key, "null"), (key, json.dumps(recorded))]
    # Every item once under the call's key; the retry wrote only those after what the killed
    # attempt had written (it redid at most the items past its last recorded heartbeat).
    items = _rows(tmp_path, "SELECT key, item, pid FROM items ORDER BY item")
    assert [(k, i) for k, i, _ in items] == [(key, i) for i in range(1, ITEMS + 1)]
    by_retry = [i for _, i, pid in items if pid != first.proc.pid]
    assert by_retry == list(range(len(written_before) + 1, ITEMS + 1))
    # The log: the call completed in doubt by its second attempt, whose heartbeats went on from there.
    events = _events(client, run.run_id)
    (done,) = [e for e in events if isinstance(e, ToolCallCompleted)]
    assert (done.attempt, done.in_doubt) == (2, True)
    second_beats = [json.loads(b.details)["done"] for b in _beats(client, run.run_id) if b.attempt == 2]
    assert second_beats and second_beats[0] > recorded["done"] and second_beats[-1] == ITEMS
    assert run.status().heartbeats == ()  # the call ended: nothing in flight to show
    print(
        f"\nkilled with {len(written_before)} of {ITEMS} items written, the log's last heartbeat at "
        f"{recorded['done']}: the retry on the next worker processed items {recorded['done'] + 1}..{ITEMS} "
        f"({ITEMS - recorded['done']}, not {ITEMS}), {len(by_retry)} of them new"
    )


def test_a_silent_tool_is_retried_after_its_heartbeat_timeout_not_its_full_timeout(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, client: Client
) -> None:
    """heartbeat_timeout=2 s, timeout=60 s: each tool's first attempt reports it started, then hangs
    (an async one sleeping, a sync one blocked in its thread) for 90 s."""
    worker = _worker(deployment, workers, tmp_path)
    worker.wait_ready(deployment.partitions)
    runs = {
        tool: client.submit("hang", {"tool": tool, "order": "48211"})
        for tool in ("hang_once_async", "hang_once_sync")
    }
    client.flush()
    for tool, run in runs.items():
        # well inside the 60 s timeout: only the heartbeat timeout can have ended the first attempt
        result = run.result(timeout=40)
        assert result == {"order": "48211", "retried_after": {"phase": "started"}}, worker.log_tail()
        events = _events(client, run.run_id)
        (scheduled,) = [e for e in events if isinstance(e, ToolCallScheduled)]
        (failure,) = [e for e in events if isinstance(e, ToolCallFailed)]
        (done,) = [e for e in events if isinstance(e, ToolCallCompleted)]
        assert (failure.error_type, failure.attempt, failure.final) == ("HeartbeatTimeout", 1, False), tool
        assert f"tool {tool!r} sent no heartbeat for 2 s" in failure.error
        assert (done.attempt, done.in_doubt) == (2, False)
        # a generous window: not the 60 s timeout (machine shared, timings noisy)
        assert failure.occurred_at - scheduled.occurred_at < 30_000, tool
        print(
            f"\n{tool}: first attempt failed {(failure.occurred_at - scheduled.occurred_at) / 1000:.1f} s "
            f"after it was scheduled (heartbeat_timeout 2 s, timeout 60 s); result after "
            f"{(done.occurred_at - scheduled.occurred_at) / 1000:.1f} s"
        )
