"""A worker pushed past its descriptor limit: not ready, named, one line; then out of descriptors, it
stops (exit 1) instead of hanging; a worker started after it completes every run, each effect once.

A real ``agentlog worker`` subprocess, its RLIMIT_NOFILE lowered to 256 once it serves (``prlimit``),
runs ``support.resource_apps``'s ``leaky`` workflow, whose tool opens descriptors and keeps them.
"""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.client import Client
from runtime.config import Settings
from support.prometheus import free_port
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.chaos

APP = "support.resource_apps:app"
LIMIT = 256


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)


def _lines(worker: WorkerProcess, event: str) -> list[dict[str, Any]]:
    """The worker's JSON log lines of ``event``."""
    found = []
    for line in worker.log_path.read_text(errors="replace").splitlines():
        start = line.find('{"event"')
        if start >= 0:
            try:
                record = json.loads(line[start:])
            except json.JSONDecodeError:
                continue
            if record.get("event") == event:
                found.append(record)
    return found


def test_a_worker_out_of_descriptors_says_so_stops_and_loses_no_run(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    port = free_port()
    counters = {"TEST_COUNTER_DIR": str(tmp_path)}
    w1 = WorkerProcess(deployment, APP, "w1", tmp_path / "w1.log", "--metrics-port", str(port), **counters)
    workers.append(w1)
    client = Client(deployment)
    try:
        w1.wait_ready(deployment.partitions)
        wait_until(lambda: _get(port, "/readyz").status_code == 200, 30, "w1 ready", detail=w1.log_tail)
        hard = resource.prlimit(w1.proc.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(w1.proc.pid, resource.RLIMIT_NOFILE, (LIMIT, hard))

        # 95 % of the limit held: the runs complete, and the worker says it is short.
        first = [client.submit("leaky", {"id": f"a{n}", "share": 0.95}).run_id for n in range(3)]
        for run_id in first:
            assert client.run(run_id).result(timeout=30).startswith("a")
        readyz = wait_until(
            lambda: (r := _get(port, "/readyz")).status_code == 503 and r.text,
            10,
            "/readyz to fail on descriptors",
            detail=w1.log_tail,
        )
        used = re.fullmatch(rf"not ready: descriptors: (\d+) of {LIMIT} in use\n", readyz)
        assert used is not None, readyz
        assert 0.9 * LIMIT <= int(used[1]) <= LIMIT
        assert _get(port, "/healthz").status_code == 200  # alive, answering
        metrics = _get(port, "/metrics").text
        assert f'agentlog_resource_limit{{resource="descriptors"}} {LIMIT:.1f}' in metrics
        short = _lines(w1, "resource_short")
        assert [(s["resource"], s["limit"]) for s in short] == [("descriptors", LIMIT)]

        # Past the limit: the call fails with EMFILE, and the worker stops on it with one line.
        second = [client.submit("leaky", {"id": f"b{n}", "share": 2.0}).run_id for n in range(3)]
        code = wait_until(w1.proc.poll, 30, "w1 to exit out of descriptors", detail=w1.log_tail)
        assert code != 0, w1.log_tail()
        stopped = _lines(w1, "worker_out_of_resource")
        assert [s["resource"] for s in stopped] == ["descriptors"], w1.log_tail()
        assert "Too many open files" in stopped[0]["error"]

        # The leak fixed, a worker with its normal limit completes every run, each effect once.
        (tmp_path / "leak-stopped").touch()
        w2 = WorkerProcess(deployment, APP, "w2", tmp_path / "w2.log", **counters)
        workers.append(w2)
        for run_id in first + second:
            assert "done" in client.run(run_id).result(timeout=30), w2.log_tail()
        charges = (tmp_path / "charges").read_text().split()
        assert len(charges) == len(set(charges)) == len(first + second)
    finally:
        client.close()
