"""A worker whose static group membership Kafka fences rejoins with a fresh consumer and carries on.

librdkafka ends a fenced static member with a fatal error (``_FATAL``, "Static consumer fenced by
other consumer with same group.instance.id"), and it fences its own member when the session timed
out while the group coordinator moved (librdkafka issue 3437; the chaos bench's coordinator row
under load). A worker that only logged it sat with no partitions forever. Here a second consumer
joins the workers' group with the worker's id, as such a rejoin does: the worker is fenced, rejoins,
claims its partitions again, and a run waiting for a signal completes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.group import consumer_config
from support.services import agentlog
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration


def test_a_fenced_worker_rejoins_and_its_waiting_run_completes(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = start_worker(deployment, workers, tmp_path)
    first_claims = worker.wait_ready(deployment.partitions, timeout=60)
    client = Client(deployment)
    run = client.submit("waiter", {})
    client.flush()
    wait_until(lambda: run.status().status == "running", 30, "the run to start", detail=worker.log_tail)

    impostor = Consumer(consumer_config(deployment, "w1", 6000))  # the worker's group.instance.id
    impostor.subscribe([deployment.commands_topic])
    try:
        wait_until(
            lambda: '"event": "membership_fenced"' in worker.log_path.read_text(errors="replace"),
            60,
            "the worker to be fenced",
            interval=0.2,
            process=worker.proc,
            detail=worker.log_tail,
        )
    finally:
        impostor.poll(0.1)
        impostor.close()
    claims = wait_until(
        lambda: (
            c
            if (c := worker.claimed()) and all(c.get(p, -1) > first_claims[p] for p in first_claims)
            else None
        ),
        90,
        "the worker to claim every partition again",
        interval=0.2,
        process=worker.proc,
        detail=worker.log_tail,
    )
    assert set(claims) == set(first_claims)
    run.signal("go", "after the fence")
    assert run.result(timeout=60) == "after the fence"
    assert worker.proc.poll() is None, worker.log_tail()
    client.close()


def test_a_session_timeout_the_group_refuses_stops_the_worker_with_the_reason(deployment: Settings) -> None:
    # librdkafka retries a JoinGroup the coordinator refuses every 2 s, forever: a worker that
    # logged it and went on never served anything.
    done = agentlog(deployment, "worker", "--app", "support.agent_apps:app", "--session-timeout-ms", "3000")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "refused --session-timeout-ms 3000" in done.stderr
    assert "group.min.session.timeout.ms" in done.stderr
    assert "Traceback" not in done.stderr
