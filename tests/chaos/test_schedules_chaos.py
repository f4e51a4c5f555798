"""A schedule firing every 2 s, two scheduler processes, one killed with SIGKILL mid-fire (after its
submission was acknowledged, before it recorded the fire time: tests/support/hanging_scheduler.py
stops there) and another started in its place: every fire time in the window started exactly one
run, and none is missing.

Each scheduler submits every fire time it sees due under the run id derived from the schedule and
the fire time; the worker starts a run id once. What the test reads is the log: the RunStarted
records of the events topic, the RunSubmitted records of the commands topic, the schedules topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.reader import read_partition
from runtime.log.records.events import RunStarted, RunSubmitted
from runtime.log.schemas.serde import Serde
from runtime.schedules import ScheduleError, firing_run_id
from runtime.schedules.timing import next_fire_time
from support.services import ROOT, agentlog, deployment_env
from support.wait import stop_process, wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
APP = "support.agent_apps:app"
EVERY_MS = 2_000


class SchedulerProcess:
    """``agentlog scheduler`` as a subprocess; its firings are the JSON lines it prints."""

    def __init__(self, settings: Settings, identity: str, log_path: Path, **hang: str) -> None:
        """``hang``: HANG_AFTER and HANG_FILE -- run tests/support/hanging_scheduler.py instead, which
        stops between its n-th submission and its record of that fire time."""
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        command = ["-m", "runtime.cli", "scheduler", "--app", APP, "--identity", identity]
        self.proc = subprocess.Popen(
            [sys.executable, *(["-m", "support.hanging_scheduler"] if hang else command)],
            cwd=ROOT,
            env=deployment_env(settings, IDENTITY=identity, **hang),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def fired(self) -> list[int]:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [json.loads(line)["fire_time"] for line in lines if line.startswith('{"schedule"')]

    def log_tail(self) -> str:
        return f"--- {self.log_path.name} ---\n" + self.log_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


def records(settings: Settings, serde: Serde, topic: str, kind: type, schedule: str = "tick") -> list[object]:
    found = []
    for partition in range(settings.partitions):
        for record in read_partition(settings, topic, partition):
            if record.key and record.key.startswith(f"{schedule}@".encode()) and record.value:
                decoded = serde.decode(record.value, record.key)
                if isinstance(decoded, kind):
                    found.append(decoded)
    return found


def test_every_fire_time_starts_exactly_one_run_with_two_schedulers_and_a_kill(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    worker = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log")
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    added = agentlog(
        deployment,
        *("schedule", "add", "tick", "--every", "2s", "--workflow", "short"),
        *("--input", '{"order": "o", "steps": 0}', "--app", APP),
    )
    assert added.returncode == 0, added.stderr
    marker = tmp_path / "s1-mid-fire"
    schedulers = [
        SchedulerProcess(deployment, "s1", tmp_path / "s1.log", HANG_AFTER="3", HANG_FILE=str(marker)),
        SchedulerProcess(deployment, "s2", tmp_path / "s2.log"),
    ]
    try:
        one, two = schedulers

        def handled() -> set[int]:
            return {t for s in schedulers for t in s.fired()}

        # s1 stops after its third submission is acknowledged, before recording it: SIGKILL then
        wait_until(marker.exists, 30, "s1 to be mid-fire", process=one.proc, detail=one.log_tail)
        mid_fire = marker.read_text()
        one.kill()
        killed_after = len(handled())
        wait_until(
            lambda: len(handled()) >= killed_after + 2, 30, "two more by the other", detail=two.log_tail
        )
        # s1 restarted (named s3, so that what s1 submitted before the kill stays its own)
        schedulers.append(SchedulerProcess(deployment, "s3", tmp_path / "s3.log"))
        wait_until(lambda: len(handled()) >= killed_after + 4, 30, "two more with the restarted one")
    finally:
        for scheduler in schedulers:
            if scheduler.proc.poll() is None:
                scheduler.stop()

    with Client(deployment) as client:
        info = client.schedules.get("tick")
        assert info.last_fire_time is not None and info.last_refused is None
        first = next_fire_time(info.schedule, info.schedule.active_from)
        expected = {firing_run_id("tick", t) for t in range(first, info.last_fire_time + 1, EVERY_MS)}
        serde = Serde(deployment)

        def started() -> Counter[str]:
            return Counter(r.run_id for r in records(deployment, serde, deployment.events_topic, RunStarted))  # type: ignore[attr-defined]

        counts = wait_until(
            lambda: found if set(found := started()) >= expected else None,
            30,
            "a run for every fire time",
            detail=worker.log_tail,
        )
        submissions = records(deployment, serde, deployment.commands_topic, RunSubmitted)
        submitted = Counter(r.run_id for r in submissions)  # type: ignore[attr-defined]
    from_s1 = {r.run_id for r in submissions if r.worker == "s1"}  # type: ignore[attr-defined]
    print(
        f"\nschedules chaos: {len(expected)} fire times over {(info.last_fire_time - first) / 1000:.0f} s, "
        f"{sum(submitted.values())} submissions ({sum(submitted.values()) - len(submitted)} duplicates), "
        f"{sum(counts.values())} runs started; s1 killed mid-fire at {mid_fire} after {killed_after} fire times"
    )
    assert mid_fire in from_s1 and mid_fire in expected  # its submission landed, and started one run
    assert len(expected) >= 6
    assert set(counts) == expected  # no fire time missing, none outside the window
    assert all(n == 1 for n in counts.values()), counts  # and each started one run
    assert set(submitted) == expected


def test_workers_started_with_schedules_fire_each_fire_time_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """``agentlog worker --schedules``: every such worker fires every fire time; one run starts."""
    for name in ("w1", "w2"):
        workers.append(WorkerProcess(deployment, APP, name, tmp_path / f"{name}.log", "--schedules"))
    with Client(deployment) as client:
        client.schedules.add("beat", "short", {"order": "o", "steps": 0}, every="1s")
        info = wait_until(
            lambda: got if (got := client.schedules.get("beat")).last_fire_time else None,
            30,
            "a first firing",
            detail=workers[0].log_tail,
        )
        assert info.last_fire_time is not None
        first = next_fire_time(info.schedule, info.schedule.active_from)
        expected = {firing_run_id("beat", t) for t in range(first, first + 4_000, 1_000)}
        serde = Serde(deployment)

        def started() -> Counter[str]:
            found = records(deployment, serde, deployment.events_topic, RunStarted, "beat")
            return Counter(r.run_id for r in found)  # type: ignore[attr-defined]

        counts = wait_until(
            lambda: found if set(found := started()) >= expected else None,
            30,
            "runs for four fire times",
            detail=workers[1].log_tail,
        )
        client.schedules.pause("beat")
        submitted = len(records(deployment, serde, deployment.commands_topic, RunSubmitted, "beat"))
    print(f"\nworkers --schedules: {len(counts)} runs started, {submitted} submissions by 2 workers")
    assert all(n == 1 for n in counts.values()), counts


def test_the_cli_refuses_what_it_cannot_do_and_lists_what_it_keeps(deployment: Settings) -> None:
    with Client(deployment) as client:
        client.schedules.add("daily", "short", {"order": "o"}, cron="@daily")
        with pytest.raises(ScheduleError, match="schedule 'daily' exists"):
            client.schedules.add("daily", "short", cron="@daily")
        client.schedules.pause("daily")
        listed = agentlog(deployment, "schedule", "list", "--json")
        [row] = json.loads(listed.stdout)
        assert (row["name"], row["cron"], row["paused"], row["next_fire_time"]) == (
            "daily",
            "0 0 * * *",
            True,
            None,
        )
        client.schedules.delete("daily")
        assert client.schedules.list() == []
    paused = agentlog(deployment, "schedule", "pause", "daily")
    assert paused.returncode == 1 and "no schedule named 'daily'" in paused.stderr, paused.stderr
    # a deployment made before schedules has no schedules topic: said so, with the fix
    missing = agentlog(
        deployment, "schedule", "list", AGENTLOG_SCHEDULES_TOPIC=f"{deployment.commands_topic}.none"
    )
    assert missing.returncode == 1 and "`agentlog infra up` creates" in missing.stderr, missing.stderr
