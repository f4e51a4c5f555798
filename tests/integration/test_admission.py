"""Admission control on a real worker (runtime.worker.admission): 300 runs submitted at once, and
their 300 approvals sent at once, through a run cache of 20. The worker holds what would bring a
run into memory past 20 busy runs, admits it as runs end or wait, and every run completes with its
effect applied once -- never more than the bound (and the few that bypass it) in memory."""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.prometheus import free_port
from support.services import make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration

RUNS = 300
CACHE = 20
# Runs in memory past the bound: the run an eviction round keeps (the one just stepped) and the
# signals to runs in memory, which are never held.
SLACK = 5
PARTITIONS = 3


def gauge(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    assert found is not None, f"{name} is not exported"
    return float(found.group(1))


def test_a_burst_through_a_cache_of_20_completes_every_run_once_within_the_bound(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = make_deployment(services, partitions=PARTITIONS)
    port = free_port()
    worker = start_worker(
        deployment,
        workers,
        tmp_path,
        "w1",
        AGENTLOG_RUN_CACHE_SIZE=str(CACHE),
        AGENTLOG_METRICS_PORT=str(port),
    )
    worker.wait_ready(PARTITIONS)
    client = Client(deployment)
    try:
        runs = [client.submit("charge_on_signal", {"account": f"acct-{i}"}).run_id for i in range(RUNS)]
        client.flush()
        for run in runs:  # at once, behind the submissions: a run's signal waits behind its held submission
            client.run(run).signal("go", "approved")
        client.flush()

        def all_done() -> bool:
            attempts = tmp_path / "charge-attempts"
            return attempts.exists() and len(attempts.read_text().splitlines()) >= RUNS

        wait_until(
            all_done, 60, "every run charged", interval=0.02, process=worker.proc, detail=worker.log_tail
        )
        assert [client.run(run).result(timeout=30) for run in runs] == ["charged"] * RUNS
        keys = Counter(line.split()[0] for line in (tmp_path / "charge-attempts").read_text().splitlines())
        assert len(keys) == RUNS and set(keys.values()) == {1}  # each effect once
        # Commands were held (the burst is far past 20), and memory never passed the bound.
        assert gauge(port, "agentlog_commands_admitted_total") >= RUNS - CACHE
        peak = gauge(port, "agentlog_runs_cached_peak")
        assert CACHE <= peak <= CACHE + SLACK, peak
        assert gauge(port, "agentlog_commands_held") == 0
    finally:
        client.close()
