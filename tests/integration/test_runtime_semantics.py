"""Runtime semantics against real Kafka and registry, with the worker as a subprocess.

The semantics that need a worker killed (a restart mid-run) are in tests/chaos/test_runtime_restarts.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.run_status import ResetOrigin
from support.services import agentlog
from support.wait import wait_for_event
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration


def test_signal_wait_times_out_durably(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run = client.submit("sleepy", {"sleep": 0, "timeout": 1})
    with pytest.raises(RunError) as failed:
        run.result(timeout=30)
    assert failed.value.status == "failed" and "TimeoutError" in failed.value.reason
    client.close()


def test_submitting_an_existing_run_id_starts_nothing_new(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run = client.submit("short", {"order": "first"}, run_id="order-48211")
    assert run.result(timeout=30) == "first"
    client.submit("short", {"order": "second"}, run_id="order-48211")
    follow = client.submit("short", {"order": "after"})  # same client, later: processed after the duplicate
    assert follow.result(timeout=30) == "after"
    history = run.history()
    assert [e["type"] for e in history].count("RunStarted") == 1
    assert run.result() == "first"
    client.close()


def test_bad_submissions_are_rejected_with_the_reason_and_nothing_stalls(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    unknown = client.submit("no-such-workflow", {"x": 1}, run_id="bad-unknown").run_id
    malformed = client.submit("short", None, run_id="bad-json", raw_input='{"order": ').run_id
    wrong_shape = client.submit("typed", {"order": "1", "amount": "lots"}, run_id="bad-shape").run_id
    not_object = client.submit("short", [1, 2], run_id="bad-list").run_id
    client.flush()
    # A poisoned record: not Avro at all. It must not stall the partition it lands in.
    producer = Producer({"bootstrap.servers": deployment.bootstrap_servers, "partitioner": "murmur2_random"})
    producer.produce(deployment.commands_topic, key=b"poison-run", value=b"\x00not avro at all")
    producer.flush(10)
    fine = [client.submit("short", {"order": f"ok{i}"}).run_id for i in range(6)]
    for run_id in fine:
        assert client.run(run_id).result(timeout=30).startswith("ok")
    expected = {
        unknown: "unknown workflow 'no-such-workflow'",
        malformed: "malformed JSON input",
        wrong_shape: "wrong input shape",
        not_object: "expected a JSON object, got list",
        "poison-run": "undecodable command",
    }
    for run_id, reason in expected.items():
        with pytest.raises(RunError) as rejected:
            client.run(run_id).result(timeout=30)
        assert rejected.value.status == "rejected", run_id
        assert reason in rejected.value.reason, (run_id, rejected.value.reason)
        assert client.run(run_id).status().status == "rejected"
    assert "amount" in (client.run(wrong_shape).status().reason or "")
    client.close()


def test_retries_are_recorded_and_a_workflow_can_catch_a_tool_failure(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run = client.submit("retrying", {"name": "svc"})
    assert run.result(timeout=30) == {
        "lucky": "third time lucky",
        "caught": "ValueError",
        "attempts": 2,
    }
    failures = [
        (e["type"], e["position"], e["attempt"], e["final"])
        for e in run.history()
        if e["type"] == "ToolCallFailed"
    ]
    assert failures == [
        ("ToolCallFailed", 1, 1, False),
        ("ToolCallFailed", 1, 2, False),
        ("ToolCallFailed", 2, 1, False),
        ("ToolCallFailed", 2, 2, True),
    ]
    completed = [e for e in run.history() if e["type"] == "ToolCallCompleted"]
    assert completed[0]["attempt"] == 3
    client.close()


def test_cancel_ends_a_waiting_run(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    run_id = client.submit("waiter", {}).run_id
    client.flush()
    wait_for_event(client, run_id, "RunStarted")  # the run is live and waiting for its signal
    client.run(run_id).cancel("customer withdrew")
    with pytest.raises(RunError) as cancelled:
        client.run(run_id).result(timeout=30)
    assert cancelled.value.status == "cancelled" and cancelled.value.reason == "customer withdrew"
    client.close()


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
    small = client.submit("short", {"order": "fits", "steps": 2})  # 6 events: not parked
    big = client.submit("short", {"order": "too-long", "steps": 20})
    assert small.result(timeout=30) == "fits"
    with pytest.raises(RunError) as parked:
        big.result(timeout=30)
    assert parked.value.status == "parked" and "history limit reached: 12 events" in parked.value.reason
    assert big.status().events == 13  # the 12 that reached the limit, then RunParked
    # The warning at 6 events is a log record only: tests/unit/test_history_limit.py checks it.
    client.close()


def test_reset_copies_the_history_before_the_position_and_repeats_effects_with_their_keys(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """`agentlog reset RUN --to 3`: the model's decision (1) and the wait (2) are copied, not
    redone; the check (3) and the refund (4) run again -- the refund with its original key."""
    (tmp_path / "open-orders.json").write_text(json.dumps(["48211"]))
    start_worker(deployment, workers, tmp_path)
    client = Client(deployment)
    original = client.submit("stale_refund", {"order": "48211", "wait": 0}).run_id
    assert client.run(original).result(timeout=30)["action"] == "refund"
    done = agentlog(deployment, "reset", original, "--to", "3", "--run-id", f"{original}-again", "--wait")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"action": "refund", "amount": 41.6, "call": 1}  # the copied decision
    assert (tmp_path / "triage").read_text() == "1"  # the model was not asked again
    keys = (tmp_path / "refund-keys").read_text().split()
    assert len(keys) == 2 and keys[0] == keys[1]  # the service sees one refund, offered twice
    status = client.run(f"{original}-again").status()
    assert status.status == "completed"
    assert status.reset_from == ResetOrigin(run_id=original, position=3)
    assert status.as_dict()["reset_from"] == {"run_id": original, "position": 3}
    copied = [e for e in client.run(f"{original}-again").history() if e["type"] != "RunStarted"][:4]
    assert [(e["type"], e["position"]) for e in copied] == [
        ("ModelCallScheduled", 1),
        ("ModelCallCompleted", 1),
        ("TimerScheduled", 2),
        ("TimerFired", 2),
    ]
    missing = agentlog(deployment, "reset", "no-such-run", "--to", "1")
    assert missing.returncode != 0 and "no-such-run has no RunStarted" in missing.stderr
    client.close()
