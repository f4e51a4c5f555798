"""Runtime semantics against real Kafka and registry, with the worker as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from conftest import ROOT, WorkerProcess, deployment_env

from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.run_status import ResetOrigin

pytestmark = pytest.mark.integration
APP = "agent_apps:app"


def start_worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, worker_id: str = "w1", **env: str
) -> WorkerProcess:
    worker = WorkerProcess(
        deployment,
        APP,
        worker_id,
        tmp_path / f"{worker_id}-{len(workers)}.log",
        TEST_COUNTER_DIR=str(tmp_path),
        **env,
    )
    workers.append(worker)
    return worker


def wait_for_event(client: Client, run_id: str, event_type: str, count: int = 1, timeout: float = 30) -> None:
    """Until the run's history holds ``count`` events of ``event_type``."""
    deadline = time.monotonic() + timeout
    while [e["type"] for e in client.history(run_id)].count(event_type) < count:
        assert time.monotonic() < deadline, (
            f"no {count} x {event_type} within {timeout}s: {client.history(run_id)}"
        )
        time.sleep(0.1)


def test_nondeterminism_by_arguments_at_step_1_parks_the_run(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    first = start_worker(deployment, workers, tmp_path, DIVERGE_STEP="1")
    client = Client(deployment)
    run_id = client.submit("divergent", {"order": "48211"})
    client.flush()
    wait_for_event(client, run_id, "ToolCallCompleted")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    start_worker(deployment, workers, tmp_path, DIVERGE_STEP="2")  # the code changed under an in-flight run
    with pytest.raises(RunError) as parked:
        client.result(run_id, timeout=30)
    assert parked.value.status == "parked"
    detected = [e for e in client.history(run_id) if e["type"] == "NonDeterminismDetected"]
    assert len(detected) == 1 and detected[0]["position"] == 1
    assert '"step":1' in detected[0]["expected"] and '"step":2' in detected[0]["issued"]
    assert "position 1" in detected[0]["message"] and "lookup" in detected[0]["message"]
    assert client.status(run_id).status == "parked"
    client.close()


def test_timer_and_signal_survive_a_worker_restart(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    first = start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("sleepy", {"sleep": 3})
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)  # dies while the timer runs
    first.proc.wait()
    start_worker(deployment, workers, tmp_path)
    wait_for_event(client, run_id, "TimerScheduled", count=2)  # the signal wait's timeout
    client.signal(run_id, "approval", {"ok": True})
    assert client.result(run_id, timeout=30) == {"approval": {"ok": True}, "slept_s": True}
    types = [e["type"] for e in client.history(run_id)]
    assert types.count("TimerFired") == 1 and types.count("SignalReceived") == 1
    client.close()


def test_signal_wait_times_out_durably(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("sleepy", {"sleep": 0, "timeout": 1})
    with pytest.raises(RunError) as failed:
        client.result(run_id, timeout=30)
    assert failed.value.status == "failed" and "TimeoutError" in failed.value.reason
    client.close()


def test_submitting_an_existing_run_id_starts_nothing_new(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("short", {"order": "first"}, run_id="order-48211")
    assert client.result(run_id, timeout=30) == "first"
    client.submit("short", {"order": "second"}, run_id="order-48211")
    follow = client.submit("short", {"order": "after"})  # same client, later: processed after the duplicate
    assert client.result(follow, timeout=30) == "after"
    history = client.history(run_id)
    assert [e["type"] for e in history].count("RunStarted") == 1
    assert client.result(run_id) == "first"
    client.close()


def test_bad_submissions_are_rejected_with_the_reason_and_nothing_stalls(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    unknown = client.submit("no-such-workflow", {"x": 1}, run_id="bad-unknown")
    malformed = client.submit("short", None, run_id="bad-json", raw_input='{"order": ')
    wrong_shape = client.submit("typed", {"order": "1", "amount": "lots"}, run_id="bad-shape")
    not_object = client.submit("short", [1, 2], run_id="bad-list")
    client.flush()
    # A poisoned record: not Avro at all. It must not stall the partition it lands in.
    producer = Producer({"bootstrap.servers": deployment.bootstrap_servers, "partitioner": "murmur2_random"})
    producer.produce(deployment.commands_topic, key=b"poison-run", value=b"\x00not avro at all")
    producer.flush(10)
    fine = [client.submit("short", {"order": f"ok{i}"}) for i in range(6)]
    for run_id in fine:
        assert client.result(run_id, timeout=30).startswith("ok")
    expected = {
        unknown: "unknown workflow 'no-such-workflow'",
        malformed: "malformed JSON input",
        wrong_shape: "wrong input shape",
        not_object: "expected a JSON object, got list",
        "poison-run": "undecodable command",
    }
    for run_id, reason in expected.items():
        with pytest.raises(RunError) as rejected:
            client.result(run_id, timeout=30)
        assert rejected.value.status == "rejected", run_id
        assert reason in rejected.value.reason, (run_id, rejected.value.reason)
        assert client.status(run_id).status == "rejected"
    assert "amount" in (client.status(wrong_shape).reason or "")
    client.close()


def test_retries_are_recorded_and_a_workflow_can_catch_a_tool_failure(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("retrying", {"name": "svc"})
    assert client.result(run_id, timeout=30) == {
        "lucky": "third time lucky",
        "caught": "ValueError",
        "attempts": 2,
    }
    failures = [
        (e["type"], e["position"], e["attempt"], e["final"])
        for e in client.history(run_id)
        if e["type"] == "ToolCallFailed"
    ]
    assert failures == [
        ("ToolCallFailed", 1, 1, False),
        ("ToolCallFailed", 1, 2, False),
        ("ToolCallFailed", 2, 1, False),
        ("ToolCallFailed", 2, 2, True),
    ]
    completed = [e for e in client.history(run_id) if e["type"] == "ToolCallCompleted"]
    assert completed[0]["attempt"] == 3
    client.close()


def test_cancel_ends_a_waiting_run(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("waiter", {})
    client.flush()
    time.sleep(1)
    client.cancel(run_id, "customer withdrew")
    with pytest.raises(RunError) as cancelled:
        client.result(run_id, timeout=30)
    assert cancelled.value.status == "cancelled" and cancelled.value.reason == "customer withdrew"
    client.close()


def agentlog(deployment: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args],
        cwd=ROOT,
        env=deployment_env(deployment),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_submit_wait_status_and_history(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    done = agentlog(
        deployment,
        "submit",
        "short",
        "--input",
        '{"order": "cli-1", "steps": 2}',
        "--run-id",
        "cli-run",
        "--wait",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "cli-1"
    status = json.loads(agentlog(deployment, "status", "cli-run", "--json").stdout)
    assert {"run_id", "workflow", "status", "events", "bytes", "in_doubt"} <= set(status)
    assert status["status"] == "completed" and status["workflow"] == "short" and status["in_doubt"] == []
    history = json.loads(agentlog(deployment, "history", "cli-run", "--json").stdout)
    assert [e["seq"] for e in history] == list(range(1, status["events"] + 1))
    assert history[0]["type"] == "RunStarted" and history[-1]["type"] == "RunCompleted"
    assert sum(1 for e in history if e["type"] == "ToolCallScheduled") == 2
    rejected = agentlog(deployment, "submit", "nope", "--input", "{}", "--wait")
    assert rejected.returncode == 1 and "unknown workflow 'nope'" in rejected.stderr


def test_a_run_at_its_history_limit_is_parked_with_the_reason(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(
        deployment, workers, tmp_path, AGENTLOG_HISTORY_WARN_EVENTS="6", AGENTLOG_HISTORY_LIMIT_EVENTS="12"
    )
    client = Client(deployment)
    small = client.submit("short", {"order": "fits", "steps": 2})  # 6 events: warned, not parked
    big = client.submit("short", {"order": "too-long", "steps": 20})
    assert client.result(small, timeout=30) == "fits"
    with pytest.raises(RunError) as parked:
        client.result(big, timeout=30)
    assert parked.value.status == "parked" and "history limit reached: 12 events" in parked.value.reason
    assert client.status(big).events == 13  # the 12 that reached the limit, then RunParked
    assert '"history_size_warning"' in workers[0].log()
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
    run_id = client.submit("stale_refund", {"order": "48211", "wait": 3})
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)  # dies while the run waits
    first.proc.wait()
    (tmp_path / "open-orders.json").write_text("[]")  # the world moved while nobody watched
    start_worker(deployment, workers, tmp_path)
    result = client.result(run_id, timeout=30)
    assert result["action"] == "hold" and result["call"] == 2
    assert not (tmp_path / "issue_refund").exists()  # the stale refund never went out
    status = client.status(run_id)
    (redecided,) = status.redecided
    assert redecided.original["action"] == "refund" and redecided.replacement["action"] == "hold"
    assert redecided.reason == "order 48211 was closed meanwhile"
    assert redecided.check["verdict"] == {"valid": False, "reason": "order 48211 was closed meanwhile"}
    types = [e["type"] for e in client.history(run_id)]
    assert types.count("Redecided") == 1 and types.count("ModelCallScheduled") == 2
    client.close()


def test_reset_copies_the_history_before_the_position_and_repeats_effects_with_their_keys(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """`agentlog reset RUN --to 3`: the model's decision (1) and the wait (2) are copied, not
    redone; the check (3) and the refund (4) run again -- the refund with its original key."""
    (tmp_path / "open-orders.json").write_text(json.dumps(["48211"]))
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    original = client.submit("stale_refund", {"order": "48211", "wait": 0})
    assert client.result(original, timeout=30)["action"] == "refund"
    done = agentlog(deployment, "reset", original, "--to", "3", "--run-id", f"{original}-again", "--wait")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"action": "refund", "amount": 41.6, "call": 1}  # the copied decision
    assert (tmp_path / "triage").read_text() == "1"  # the model was not asked again
    keys = (tmp_path / "refund-keys").read_text().split()
    assert len(keys) == 2 and keys[0] == keys[1]  # the service sees one refund, offered twice
    status = client.status(f"{original}-again")
    assert status.status == "completed"
    assert status.reset_from == ResetOrigin(run_id=original, position=3)
    assert status.as_dict()["reset_from"] == {"run_id": original, "position": 3}
    copied = [e for e in client.history(f"{original}-again") if e["type"] != "RunStarted"][:4]
    assert [(e["type"], e["position"]) for e in copied] == [
        ("ModelCallScheduled", 1),
        ("ModelCallCompleted", 1),
        ("TimerScheduled", 2),
        ("TimerFired", 2),
    ]
    missing = agentlog(deployment, "reset", "no-such-run", "--to", "1")
    assert missing.returncode != 0 and "no-such-run has no RunStarted" in missing.stderr
    client.close()


def test_a_large_result_is_stored_out_of_line_and_served_on_replay(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """A 44 KB tool result goes to the payloads topic; the event keeps offset, size and sha256.
    A worker killed after it is recorded is replaced, and the replay serves the stored result
    (checked against its sha256) instead of calling the tool again."""
    first = start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("report", {"order": "48211", "wait": 2})
    client.flush()
    wait_for_event(client, run_id, "TimerScheduled")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    start_worker(deployment, workers, tmp_path)
    assert client.result(run_id, timeout=30) == {
        "call": 1,
        "chars": 44_000,
        "head": "line 1 of the report. li",
    }
    assert (tmp_path / "big_report").read_text() == "1"  # served from the log, not called again
    (stored,) = [e for e in client.history(run_id) if e["type"] == "ToolCallCompleted"]
    assert stored["result"] == "" and stored["result_size"] > 44_000 and len(stored["result_sha256"]) == 64
    assert isinstance(stored["result_offset"], int)
    assert client.status(run_id).bytes < 2_000  # the history stays small
    (read_back,) = [e for e in client.history(run_id, payloads=True) if e["type"] == "ToolCallCompleted"]
    assert json.loads(read_back["result"])["text"].startswith("line 1 of the report.")
    again = client.reset(run_id, 2)  # a reset copies the stored result, read back, and replays it
    assert client.result(again, timeout=30)["call"] == 1
    assert (tmp_path / "big_report").read_text() == "1"
    client.close()
