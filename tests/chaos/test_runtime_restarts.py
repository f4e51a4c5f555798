"""Runtime semantics across a worker SIGKILLed mid-run and replaced: what the log recorded
decides what the new worker does (real Kafka and registry, workers as subprocesses)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from runtime.client import Client, RunError
from runtime.config import Settings
from support.wait import wait_for_event
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_nondeterminism_by_arguments_at_step_1_parks_the_run(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    first = start_worker(deployment, workers, tmp_path, DIVERGE_STEP="1")
    client = Client(deployment)
    run_id = client.submit("divergent", {"order": "48211"}).run_id
    client.flush()
    wait_for_event(client, run_id, "ToolCallCompleted")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    start_worker(deployment, workers, tmp_path, DIVERGE_STEP="2")  # the code changed under an in-flight run
    with pytest.raises(RunError) as parked:
        client.run(run_id).result(timeout=90)  # a takeover: a session timeout and a worker's start
    assert parked.value.status == "parked"
    detected = [e for e in client.run(run_id).history() if e["type"] == "NonDeterminismDetected"]
    assert len(detected) == 1 and detected[0]["position"] == 1
    assert '"step":1' in detected[0]["expected"] and '"step":2' in detected[0]["issued"]
    assert "position 1" in detected[0]["message"] and "lookup" in detected[0]["message"]
    assert client.run(run_id).status().status == "parked"
    client.close()


def test_timer_and_signal_survive_a_worker_restart(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    first = start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("sleepy", {"sleep": 3}).run_id
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)  # dies while the timer runs
    first.proc.wait()
    start_worker(deployment, workers, tmp_path)
    wait_for_event(client, run_id, "TimerScheduled", count=2)  # the signal wait's timeout
    client.run(run_id).signal("approval", {"ok": True})
    assert client.run(run_id).result(timeout=30) == {"approval": {"ok": True}, "slept_s": True}
    types = [e["type"] for e in client.run(run_id).history()]
    assert types.count("TimerFired") == 1 and types.count("SignalReceived") == 1
    client.close()


def test_a_decision_gone_stale_while_the_worker_was_dead_is_re_decided_not_acted_on(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """The planner decides to refund, the run waits, the worker is SIGKILLed; meanwhile the order
    closes. The restarted worker's re-decide point checks the recorded decision against the world
    as it is now, asks the model again, records why -- and refunds nothing."""
    (tmp_path / "open-orders.json").write_text(json.dumps(["48211"]))
    first = start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("stale_refund", {"order": "48211", "wait": 3}).run_id
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)  # dies while the run waits
    first.proc.wait()
    (tmp_path / "open-orders.json").write_text("[]")  # the world moved while nobody watched
    start_worker(deployment, workers, tmp_path)
    result = client.run(run_id).result(timeout=30)
    assert result["action"] == "hold" and result["call"] == 2
    assert not (tmp_path / "issue_refund").exists()  # the stale refund never went out
    status = client.run(run_id).status()
    (redecided,) = status.redecided
    assert redecided.original["action"] == "refund" and redecided.replacement["action"] == "hold"
    assert redecided.reason == "order 48211 was closed meanwhile"
    assert redecided.check["verdict"] == {"valid": False, "reason": "order 48211 was closed meanwhile"}
    types = [e["type"] for e in client.run(run_id).history()]
    assert types.count("Redecided") == 1 and types.count("ModelCallScheduled") == 2
    client.close()


def test_a_large_result_is_stored_out_of_line_and_served_on_replay(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """A 44 KB tool result goes to the payloads topic; the event keeps offset, size and sha256.
    A worker killed after it is recorded is replaced, and the replay serves the stored result
    (checked against its sha256) instead of calling the tool again."""
    first = start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("report", {"order": "48211", "wait": 2}).run_id
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    start_worker(deployment, workers, tmp_path)
    assert client.run(run_id).result(timeout=30) == {
        "call": 1,
        "chars": 44_000,
        "head": "line 1 of the report. li",
    }
    assert (tmp_path / "big_report").read_text() == "1"  # served from the log, not called again
    (stored,) = [e for e in client.run(run_id).history() if e["type"] == "ToolCallCompleted"]
    assert stored["result"] == "" and stored["result_size"] > 44_000 and len(stored["result_sha256"]) == 64
    assert isinstance(stored["result_offset"], int)
    assert client.run(run_id).status().bytes < 2_000  # the history stays small
    (read_back,) = [e for e in client.run(run_id).history(payloads=True) if e["type"] == "ToolCallCompleted"]
    assert json.loads(read_back["result"])["text"].startswith("line 1 of the report.")
    again = client.run(run_id).reset(2).run_id  # a reset copies the stored result, read back, and replays it
    assert client.run(again).result(timeout=30)["call"] == 1
    assert (tmp_path / "big_report").read_text() == "1"
    client.close()
