"""A worker whose run cache holds 100 runs serves 1,000 runs waiting on a signal (issue 37).

The runs wait past the cache, so most of them leave memory; a worker killed then is replaced by
one that indexes the waiting runs without replaying them; the signals wake them, and a kill -9
while about half are being woken leaves a fresh worker to finish the rest. Every run completes,
and each effect applies once (an effect in flight at the kill runs again under its key, in doubt,
as the contract says)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.events import LogReader
from support.prometheus import free_port
from support.services import make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RUNS = 1_000
CACHE = "100"
PARTITIONS = 3


def taken_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    """Every ``partition_taken`` line the worker logged."""
    found = []
    for line in worker.log_path.read_text(errors="replace").splitlines():
        start = line.find('{"event": "partition_taken"')
        if start >= 0:
            found.append(json.loads(line[start:]))
    return found


def charge_keys(tmp_path: Path) -> list[str]:
    """The idempotency key of every attempt of the effecting tool, as it ran (support.agent_apps)."""
    attempts = tmp_path / "charge-attempts"
    return [line.split()[0] for line in attempts.read_text().splitlines()] if attempts.exists() else []


def evicted_now(port: int) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(r'^agentlog_runs_cached\{where="evicted"\} (\S+)$', body, re.MULTILINE)
    assert found is not None, "agentlog_runs_cached is not exported"
    return float(found.group(1))


def test_a_small_run_cache_serves_a_thousand_waiting_runs_through_two_kills(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=PARTITIONS)
    port = free_port()
    first = start_worker(
        deployment, workers, tmp_path, "w1", AGENTLOG_RUN_CACHE_SIZE=CACHE, AGENTLOG_METRICS_PORT=str(port)
    )
    first.wait_ready(PARTITIONS)
    client = Client(deployment)
    reader = LogReader(deployment)
    try:
        runs = [client.submit("charge_on_signal", {"account": f"acct-{i}"}).run_id for i in range(RUNS)]
        client.flush()

        def listed_waiting() -> bool:
            listed: set[str] = set()
            for partition in range(PARTITIONS):
                checkpoints = reader.checkpoints(partition)
                if checkpoints:
                    listed |= set(checkpoints[-1].waiting_runs)
            return listed >= set(runs)

        wait_until(
            listed_waiting,
            60,
            "checkpoints listing every run as waiting",
            process=first.proc,
            detail=first.log_tail,
        )
        # At most 100 in memory: the rest were evicted, their records kept, the runs not.
        assert evicted_now(port) >= RUNS - int(CACHE)
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=10)

        # The successor indexes the waiting runs from the checkpoints: none replayed.
        second = start_worker(deployment, workers, tmp_path, "w2", AGENTLOG_RUN_CACHE_SIZE=CACHE)
        second.wait_ready(PARTITIONS)
        taken = wait_until(
            lambda: lines if len(lines := taken_lines(second)) == PARTITIONS else None,
            30,
            "the successor's partition_taken lines",
            detail=second.log_tail,
        )
        assert sum(t["indexed_waiting"] for t in taken) == RUNS
        assert sum(t["active_runs"] for t in taken) == 0
        assert sum(t["records_decoded"] for t in taken) < RUNS  # claims and the tail, not the runs

        # Every run's signal, sent while the worker wakes them; it is killed about half-way.
        sent = threading.Event()

        def send_signals() -> None:
            sender = Client(deployment)
            try:
                for run in runs:
                    sender.run(run).signal("go", "approved")
            finally:
                sender.close()
                sent.set()

        signaller = threading.Thread(target=send_signals, name="signals")
        signaller.start()
        wait_until(
            lambda: len(set(charge_keys(tmp_path))) >= RUNS // 2,
            60,
            "half of the runs charged",
            interval=0.01,
            process=second.proc,
            detail=second.log_tail,
        )
        os.kill(second.proc.pid, signal.SIGKILL)
        second.proc.wait(timeout=10)
        charged_at_kill = len(set(charge_keys(tmp_path)))

        third = start_worker(deployment, workers, tmp_path, "w3", AGENTLOG_RUN_CACHE_SIZE=CACHE)
        third.wait_ready(PARTITIONS)
        signaller.join(timeout=60)
        assert sent.is_set()
        assert [client.run(run).result(timeout=60) for run in runs] == ["charged"] * RUNS
        print(f"charged before the second kill: {charged_at_kill} of {RUNS}")
        assert charged_at_kill < RUNS  # the kill came while runs were still being woken

        keys = Counter(charge_keys(tmp_path))
        assert len(keys) == RUNS  # every run's effect applied, under its own key
        # An effect runs twice only if it was in flight at the kill: run again in doubt, same key.
        in_doubt = {
            d["idempotency_key"] for t in taken_lines(third) for d in t["in_doubt"] if d["name"] == "charge"
        }
        assert {key for key, n in keys.items() if n > 1} <= in_doubt
        assert all(n <= 2 for n in keys.values())
    finally:
        client.close()
        reader.close()
