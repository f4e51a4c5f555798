"""Crash, fencing and recovery of the runtime, with real workers (subprocesses) on real Kafka.

Crashes are SIGKILL; the zombie is SIGSTOP/SIGCONT. The outside world of the refund agent is
a SQLite file with UNIQUE idempotency keys that counts every attempt (examples/refund_agent.py).
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.kafka.reader import read_partition
from runtime.log.records.events import ModelCallCompleted
from runtime.log.schemas.serde import Serde
from runtime.run_status import InDoubtCall
from runtime.worker.rebuild import rebuild
from support.events import LogReader
from support.refund_world import REFUND_APP, wait_inside_step_31, world
from support.services import make_deployment
from support.wait import wait_until
from support.workers import APP, WorkerProcess, child_pids

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def refund_worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, *args: str, **hang: str
) -> tuple[sqlite3.Connection, dict[str, str], WorkerProcess]:
    """The refund agent's world, and a ready worker (``args``: extra CLI flags) that hangs where
    ``hang`` says (e.g. ``REFUND_HANG_AT_STEP="31"``); returns the world, the env and the worker."""
    db_path = tmp_path / "world.db"
    env = {"REFUND_WORLD_DB": str(db_path), **hang}
    worker = WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1.log", *args, **env)
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    return world(db_path), env, worker


def test_refund40_killed_when_step_31_model_call_starts(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db, env, first = refund_worker(deployment, workers, tmp_path, REFUND_HANG_AT_STEP="31")
    client = Client(deployment)
    run_id = client.submit("refund", {"order": "48211"}).run_id
    client.flush()
    wait_inside_step_31(db, first.reader, client, run_id)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    first_attempt_nonces = [row[0] for row in db.execute("SELECT nonce FROM model_calls ORDER BY id")]

    second = WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1b.log", **env)
    workers.append(second)
    result = client.run(run_id).result(timeout=60)
    epoch = second.wait_ready(deployment.partitions)[client.run(run_id).partition]

    calls = dict(db.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())
    assert [step for step in range(1, 31) if calls[step] != 1] == []  # 0 re-executed model calls for 1-30
    assert calls[31] == 2 and all(calls[s] == 1 for s in range(32, 41))
    assert db.execute("SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM effect_attempts").fetchone() == (
        3,
        3,
    )
    assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 3  # 0 duplicate effects
    assert (
        result["nonces"][:30] == first_attempt_nonces[:30]
    )  # the recorded first-attempt results were served
    assert result["nonces"][30] != first_attempt_nonces[30]  # step 31 really ran again
    status = client.run(run_id).status()
    assert status.status == "completed"
    assert status.in_doubt == (InDoubtCall(kind="model", position=61, idempotency_key=None, name="planner"),)
    # The worker that took over found the call in doubt and re-ran it: the only in-doubt
    # completion in the run's log was written under its epoch.
    serde = Serde(deployment)
    in_doubt = [
        (e.position, e.epoch)
        for r in read_partition(deployment, deployment.events_topic, client.run(run_id).partition)
        if r.key == run_id.encode() and r.value
        for e in [serde.decode(r.value, r.key)]
        if isinstance(e, ModelCallCompleted) and e.in_doubt
    ]
    assert in_doubt == [(61, epoch)], second.log_tail()
    client.close()


def test_kill_inside_an_effect_applies_it_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db, env, first = refund_worker(deployment, workers, tmp_path, REFUND_HANG_IN_EFFECT="refund")
    client = Client(deployment)
    run = client.submit("refund", {"order": "48211", "steps": 25})
    client.flush()
    wait_until(
        lambda: db.execute("SELECT COUNT(*) FROM effects WHERE kind='refund'").fetchone()[0] == 1,
        60,
        "the refund",
    )
    os.kill(first.proc.pid, signal.SIGKILL)  # after the effect, before its result is recorded
    first.proc.wait()

    workers.append(WorkerProcess(deployment, REFUND_APP, "w1", tmp_path / "w1b.log", **env))
    run.result(timeout=60)
    attempts = db.execute("SELECT idempotency_key FROM effect_attempts WHERE kind='refund'").fetchall()
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # re-executed with the same key
    assert db.execute("SELECT COUNT(*) FROM effects WHERE kind='refund'").fetchone()[0] == 1
    in_doubt = run.status().in_doubt
    assert in_doubt == (InDoubtCall(kind="tool", position=44, idempotency_key=attempts[0][0], name="refund"),)
    client.close()


def test_zombie_writes_after_losing_its_partition_stay_invisible(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    env = {"TEST_COUNTER_DIR": str(tmp_path), "STALL_SECONDS": "2"}
    zombie = WorkerProcess(deployment, APP, "zombie", tmp_path / "zombie.log", **env)
    workers.append(zombie)
    zombie.wait_ready(deployment.partitions)
    client = Client(deployment)
    run_id = client.submit("pausing", {"account": "acct-7"}).run_id
    client.flush()
    wait_until((tmp_path / "stall").exists, 30, "the zombie's model call to start")
    os.kill(zombie.proc.pid, signal.SIGSTOP)  # frozen mid-call, holding the partition
    try:
        successor = WorkerProcess(deployment, APP, "successor", tmp_path / "successor.log", **env)
        workers.append(successor)
        assert client.run(run_id).result(timeout=90) == "charged"  # taken over after the session timeout
    finally:
        os.kill(zombie.proc.pid, signal.SIGCONT)
    # On SIGCONT two things race inside the zombie: its stalled call returns (and it records the
    # result and the charge's Scheduled record under its old epoch), and librdkafka notices the
    # session timed out (and revokes its partitions). Either may win; whatever the zombie wrote
    # after the successor's claim must be invisible, and it must never charge. (Writes that
    # certainly land behind a newer claim are pinned in tests/integration/test_audit.py.)
    partition = client.run(run_id).partition
    successor_claims = successor.claimed()  # it took all partitions while the zombie was frozen
    successor_claim = successor_claims[partition]
    reader = LogReader(deployment)

    def zombie_late() -> list[tuple[int, str]]:
        return [
            (o, e.type)
            for o, e in reader.events(partition, successor_claim)
            if e.worker == "zombie" and e.run_id == run_id
        ]

    # It rejoins the workers' group, which first takes its old partitions from it: once it claims
    # a partition again, it acts on none it lost (and never will), and all it wrote late is in.
    wait_until(
        lambda: reader.claimed_by("zombie", {p: e + 1 for p, e in successor_claims.items()}),
        60,
        "the zombie to rejoin and claim a partition anew",
        process=zombie.proc,
        detail=zombie.log_tail,
    )
    late = zombie_late()
    reader.close()

    charges = (tmp_path / "charge-attempts").read_text().splitlines()
    assert len(charges) == 1 and str(successor.proc.pid) in charges[0]  # no duplicate effect
    # What the zombie wrote is a prefix of this, and what landed late a run of it: the model call
    # starts before its Scheduled record (and RunStarted) is acknowledged, so those may still be in
    # librdkafka's queue when it freezes; the charge's outcome is never among them...
    written = ["RunStarted", "ModelCallScheduled", "ModelCallCompleted", "ToolCallScheduled"]
    late_types = [t for _, t in late]
    assert any(late_types == written[i : i + len(late_types)] for i in range(len(written) + 1)), late_types
    zombie_late_offsets = {o for o, _ in late}
    history = client.run(run_id).history()
    assert not {e["offset"] for e in history} & zombie_late_offsets  # ...and invisible
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))
    assert [e["type"] for e in history][-3:] == ["ToolCallScheduled", "ToolCallCompleted", "RunCompleted"]
    assert client.run(run_id).status().status == "completed"
    client.close()


def test_recovery_decodes_the_active_run_not_the_partition(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=1)
    env = {"TEST_COUNTER_DIR": str(tmp_path)}
    first = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log", **env)
    workers.append(first)
    first.wait_ready(1)
    client = Client(deployment)
    active = client.submit("waiter", {}).run_id
    done = [client.submit("short", {"order": f"o{i}", "steps": 3}).run_id for i in range(40)]
    client.flush()
    for run_id in done:
        client.run(run_id).result(timeout=60)
    reader = LogReader(deployment)
    written = reader.end(0)  # everything the runs wrote lies below
    # A checkpoint (every 2 s) that covers it, listing only the run still active.
    checkpoint = wait_until(
        lambda: next((c for c in reader.checkpoints(0) if c.covered_offset >= written), None),
        30,
        f"a checkpoint covering offset {written}",
        process=first.proc,
        detail=first.log_tail,
    )
    assert list(checkpoint.active_runs) == [active]
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()

    second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", **env)
    workers.append(second)
    epoch = second.wait_ready(1)[0]
    # What the second worker's takeover read: the rebuild it ran, run again over the same log up
    # to its claim (a read only: it writes nothing).
    log = KafkaLog(deployment)
    try:
        rebuilt = rebuild(deployment, Serde(deployment), log, 0, epoch)
    finally:
        log.close()
    reader.close()
    active_history = client.run(active).status().events
    total = sum(1 for _ in read_partition(deployment, deployment.events_topic, 0))
    print(
        f"partition holds {total} records; rebuild read {rebuilt.records_read}, decoded {rebuilt.records_decoded}"
    )
    assert total > 40 * 8
    assert [*rebuilt.active, *rebuilt.waiting] == [active]  # waiting on its signal: indexed, maybe unreplayed
    assert rebuilt.records_decoded <= active_history + 5  # the active run plus the claims/tail
    client.run(active).signal("go", {"ok": 1})
    assert client.run(active).result(timeout=30) == {"ok": 1}  # and the second worker resumed it
    client.close()


def test_respawn_forks_a_new_worker_when_the_worker_is_killed(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    db, _, supervisor = refund_worker(deployment, workers, tmp_path, "--respawn", REFUND_HANG_AT_STEP="31")
    client = Client(deployment)
    run_id = client.submit("refund", {"order": "48211"}).run_id
    client.flush()
    wait_inside_step_31(db, supervisor.reader, client, run_id)
    [[child]] = db.execute("SELECT pid FROM model_calls WHERE step = 31").fetchall()
    # the worker runs in a forked child: the supervisor's only child, the one calling the model
    assert child != supervisor.proc.pid and child_pids(supervisor.proc.pid) == [child]
    os.kill(child, signal.SIGKILL)

    result = client.run(run_id).result(timeout=60)
    assert supervisor.proc.poll() is None  # the supervisor lived on ...
    [[_], [respawned]] = db.execute("SELECT pid FROM model_calls WHERE step = 31 ORDER BY id").fetchall()
    assert respawned not in (child, supervisor.proc.pid)  # ... and forked anew: the new worker
    assert child_pids(supervisor.proc.pid) == [respawned], supervisor.log_tail()  # re-ran step 31
    calls = dict(db.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())
    assert [step for step in range(1, 31) if calls[step] != 1] == [] and calls[31] == 2
    assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 3
    assert len(set(result["nonces"])) == 40  # the forked worker draws its own nonces
    assert client.run(run_id).status().in_doubt == (
        InDoubtCall(kind="model", position=61, idempotency_key=None, name="planner"),
    )

    supervisor.proc.send_signal(signal.SIGTERM)  # forwarded: the worker stops, then the supervisor
    assert supervisor.proc.wait(timeout=30) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(respawned, 0)
    client.close()
