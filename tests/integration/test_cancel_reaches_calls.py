"""A cancel that reaches the call in flight, and run deadlines, on the real services with a worker
subprocess (tests/support/cancel_apps.py): a 5 s workflow deadline cancels a run waiting for a
signal (its cleanup call recorded, its compensation applied once); a client's cancel stops an async
tool's task, a sync tool polling ``cancelled()``, and an effect, named in doubt with its key; a
deadline in the past and a cancel of an ended run are refused with the reason."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.client.handle import RunAlreadyEnded
from runtime.config import Settings
from runtime.workflow.deadlines import DeadlineError, describe
from support.services import agentlog, make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

APP = "support.cancel_apps:app"


@pytest.fixture(scope="module")
def world(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Path]]:
    """One deployment and one worker for the module: both tests' runs share it."""
    deployment = make_deployment(services)
    where = tmp_path_factory.mktemp("cancel")
    worker = WorkerProcess(deployment, APP, "w1", where / "w1.log", TEST_COUNTER_DIR=str(where))
    try:
        worker.wait_ready(deployment.partitions)
        yield deployment, where
    finally:
        worker.stop()


@pytest.fixture
def client(world: tuple[Settings, Path]) -> Iterator[Client]:
    with Client(world[0]) as opened:
        yield opened


def _ended(client: Client, run_id: str, timeout: float = 60) -> str:
    return wait_until(
        lambda: (s := client.run(run_id).status().status) not in ("running", "unknown") and s,
        timeout,
        f"run {run_id} to end",
    )


def _lines(where: Path, name: str) -> list[str]:
    path = where / name
    return path.read_text().splitlines() if path.exists() else []


def test_a_deadline_cancels_a_waiting_run_its_cleanup_recorded_its_compensation_applied_once(
    world: tuple[Settings, Path], client: Client
) -> None:
    deployment, where = world
    submitted = time.time()
    run = client.submit("booked_then_waits", {"seat": "12A"}).run_id
    # A submission's own deadline, the earlier one, binds a run of a workflow without one.
    short = client.submit("waits", {}, deadline=dt.timedelta(seconds=2)).run_id
    assert _ended(client, run) == "cancelled"
    took = time.time() - submitted
    assert 4 <= took <= 15, f"cancelled {took:.1f} s after its submission; its deadline is 5 s"
    status = client.run(run).status()
    started = next(e for e in client.run(run).history() if e["type"] == "RunStarted")
    assert started["deadline"] is not None
    assert status.reason == f"deadline {describe(started['deadline'])} passed"
    history = [e["type"] for e in client.run(run).history()]
    assert history.count("ToolCallScheduled") == 3  # book, the cleanup, unbook
    assert _lines(where, "cleanup") == [status.reason]  # the cleanup call ran once, with the reason
    with sqlite3.connect(where / "world.db") as db:
        rows = db.execute("SELECT tool, arg FROM effects ORDER BY tool").fetchall()
    assert [r for r in rows if r[1] == "12A"] == [("book", "12A"), ("unbook", "12A")]
    assert [(c.tool, c.state) for c in status.compensations] == [("unbook", "completed")]

    assert _ended(client, short) == "cancelled"
    assert (client.run(short).status().reason or "").startswith("deadline ")

    # Refused: a deadline in the past (client and CLI), a cancel of a run that has ended.
    with pytest.raises(DeadlineError, match="in the past"):
        client.submit("waits", {}, deadline=dt.datetime(2001, 1, 1, tzinfo=dt.UTC))
    refused = agentlog(
        deployment, "submit", "waits", "--input", "{}", "--deadline", "2001-01-01T00:00:00+00:00"
    )
    assert refused.returncode != 0 and "in the past" in refused.stderr, refused.stderr
    with pytest.raises(RunAlreadyEnded, match="has ended"):
        client.run(run).cancel()
    again = agentlog(deployment, "cancel", run)
    assert again.returncode != 0 and f"run {run} has ended (cancelled" in again.stderr, again.stderr


def test_a_cancel_stops_the_calls_in_flight_and_names_the_effect_in_doubt(
    world: tuple[Settings, Path], client: Client
) -> None:
    _, where = world
    run = client.submit("three_long_calls", {}).run_id
    wait_until(
        lambda: all(_lines(where, n) for n in ("slow_async", "slow_sync", "slow_charge")),
        60,
        "the three calls to start",
    )
    cancelled_at = time.time()
    client.run(run).cancel(reason="the operator stopped it")
    assert _ended(client, run) == "cancelled"
    seen = wait_until(
        lambda: next((x for x in _lines(where, "slow_async") if x.startswith("cancelled")), None),
        10,
        "the async tool to see its cancel",
    )
    # Measured on a loaded machine: reported, bounded loosely (its tool would run 30 s).
    assert float(seen.split()[1]) - cancelled_at < 10
    stopped = wait_until(
        lambda: next((x for x in _lines(where, "slow_sync") if x.startswith("stopped")), None),
        10,
        "the sync tool to see cancelled()",
    )
    assert float(stopped.split()[1]) - cancelled_at < 10
    status = client.run(run).status()
    assert status.reason == "the operator stopped it"
    key = next(
        e["idempotency_key"]
        for e in client.run(run).history()
        if e["type"] == "ToolCallScheduled" and e["tool"] == "slow_charge"
    )
    assert [(d.name, d.idempotency_key) for d in status.in_doubt] == [("slow_charge", key)]
    assert f"started {key}" in _lines(where, "slow_charge")
    failures = [e for e in client.run(run).history() if e["type"] == "ToolCallFailed"]
    assert sorted(e["error_type"] for e in failures) == ["RunCancelledError"] * 3
    print(  # the numbers for the report (noisy: a shared 2-core machine)
        f"async tool cancelled {float(seen.split()[1]) - cancelled_at:.3f} s after the cancel; "
        f"sync tool stopped {float(stopped.split()[1]) - cancelled_at:.3f} s after"
    )
