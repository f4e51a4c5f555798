"""Three KRaft nodes (``agentlog infra up --brokers 3``'s cluster), the partition leader SIGKILLed
while runs execute: every run completes, no effect twice, the worker survives.

A private cluster on ports 27092-27094 (controllers 27192-27194), the shared registry.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from examples.refund_agent import init_world
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from support.cluster import kill_node, leader_of, private_cluster, restart_node
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RUNS = 30
STEPS = 20  # one effect a run: send_email at step 14 (examples/refund_agent.py)


@pytest.fixture(scope="module")
def cluster(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with private_cluster(services, tmp_path_factory.mktemp("cluster")) as settings:
        yield settings


def test_topics_are_replicated_three_times_with_two_in_sync(cluster: Settings) -> None:
    deployment = scratch_deployment(cluster, partitions=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    meta = admin.list_topics(deployment.events_topic, timeout=10).topics[deployment.events_topic]
    assert [len(p.replicas) for p in meta.partitions.values()] == [3, 3, 3]
    resource = ConfigResource(ConfigResource.Type.TOPIC, deployment.events_topic)
    config = admin.describe_configs([resource])[resource].result()
    assert config["min.insync.replicas"].value == "2"
    assert config["unclean.leader.election.enable"].value == "false"


def world_counts(db: Path) -> tuple[int, int, int]:
    """Model calls, effect attempts and effects in the refund agent's world."""
    with sqlite3.connect(db, timeout=30) as conn:
        return (
            conn.execute("SELECT count(*) FROM model_calls").fetchone()[0],
            conn.execute("SELECT count(*) FROM effect_attempts").fetchone()[0],
            conn.execute("SELECT count(*) FROM effects").fetchone()[0],
        )


def keys_attempted_twice(db: Path) -> dict[str, int]:
    """Effect keys attempted more than once, with their attempts."""
    with sqlite3.connect(db, timeout=30) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, count(*) FROM effect_attempts GROUP BY 1 HAVING count(*) > 1"
        ).fetchall()
    return {str(key): int(n) for key, n in rows}


def finished(client: Client, runs: list[str]) -> dict[str, dict[str, int]]:
    results: dict[str, dict[str, int]] = {}
    for run in runs:
        status = client.run(run).status()
        assert status.status in ("running", "completed"), (run, status.status, status.reason)
        if status.status == "completed":
            results[run] = status.result
    return results


@pytest.mark.timeout(600)
def test_the_partition_leader_killed_mid_run_loses_nothing_and_doubles_nothing(
    cluster: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = scratch_deployment(cluster, partitions=3)
    world = tmp_path / "world.db"
    with sqlite3.connect(world) as conn:
        init_world(conn)
    worker = WorkerProcess(
        deployment,
        "examples.refund_agent:app",
        "w1",
        tmp_path / "w1.log",
        REFUND_WORLD_DB=str(world),
    )
    workers.append(worker)
    worker.wait_ready(deployment.partitions, timeout=120)
    client = Client(deployment)
    runs = [client.submit("refund", {"order": f"o{i}", "steps": STEPS}).run_id for i in range(RUNS)]
    client.flush()
    wait_until(
        lambda: world_counts(world)[0] >= RUNS * STEPS // 4,
        120,
        "a quarter of the steps to run",
        process=worker.proc,
        detail=worker.log_tail,
    )
    leader = leader_of(deployment, deployment.events_topic, 0)
    killed_at = time.monotonic()
    kill_node(deployment, leader)
    results = wait_until(
        lambda: done if len(done := finished(client, runs)) == RUNS else None,
        300,
        f"all {RUNS} runs to complete after the kill",
        interval=1.0,
        process=worker.proc,
        detail=worker.log_tail,
    )
    recovered_s = time.monotonic() - killed_at
    restart_node(deployment, leader)
    assert worker.proc.poll() is None, "the worker died:\n" + worker.log_tail()
    assert all(r["steps"] == STEPS for r in results.values())
    model_calls, attempts, effects = world_counts(world)
    assert effects == RUNS, f"{effects} effects for {RUNS} runs"
    retried = keys_attempted_twice(world)
    for run in runs:  # history equals the effects observed: one recorded send_email a run
        history = client.run(run).history()
        scheduled = [e for e in history if e["type"] == "ToolCallScheduled" and e["tool"] == "send_email"]
        positions = {e["position"] for e in scheduled}
        sent = [e for e in history if e["type"] == "ToolCallCompleted" and e["position"] in positions]
        assert len(scheduled) == 1 and len(sent) == 1, (run, [e["type"] for e in history])
        # A key attempted twice is a call whose worker lost the partition with the call in
        # flight: the successor retried it under the recorded key, and the history says so.
        if scheduled[0]["idempotency_key"] in retried:
            assert sent[0]["in_doubt"], (run, sent[0])
    assert attempts == RUNS + sum(n - 1 for n in retried.values()), f"{attempts} attempts, retried {retried}"
    client.close()
    print(
        f"leader node {leader} SIGKILLed; {RUNS} runs of {STEPS} steps completed {recovered_s:.1f}s later; "
        f"{effects} effects from {attempts} attempts ({len(retried)} keys retried in doubt); {model_calls} model calls"
    )
