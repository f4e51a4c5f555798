"""L, T and R of the end-to-end workload on Restate: one JSON line on stdout.

Runs in the peers' virtualenv (bench/peers/requirements.txt). Starts a restate-server of its own
(single node, state in ``--workdir``, every port moved to ``--port-base`` .. +2: ingress, admin,
node) and the service (bench/peers/restate_app.py, hypercorn in its process, on ``--port-base`` + 10),
registers the service, measures, and stops both.

The client is Restate's HTTP ingress, used as agentlog's ``Client`` is: a submission is
``POST /E2E/run/send`` (answered once the server has the invocation durably), a result is
``GET /restate/invocation/{id}/attach``. ``--workload`` picks the handler: ``async`` is ``E2E/run``,
``sync`` is ``E2E/run_sync`` (bench/peers/workload.py).

L  ms per step of one run on an idle service, send -> attach answered / 40 (median of ``--l-runs``)
T  steps/s, ``--t-runs`` runs sent one after another from one client, then awaited together
   (one connection each): first send -> last result; CPU ms per step of restate-server and the
   service (SDK) process together over the same stretch (/proc: user + system)
R  s from the start of a fresh service process, after the one running the run was killed
   (SIGKILL) in its 31st tool call (bench/peers/workload.py), to the run's result (the server
   retries the invocation on its default policy: 500 ms, then doubling); R CPU, the fresh service
   process's CPU from its start to the result plus restate-server's over the same stretch
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.peers.cpu import total
from bench.peers.figures import latency_and_throughput, recovery
from bench.peers.workload import STEPS, crash_run, wait_in_crash_step

ROOT = Path(__file__).resolve().parents[2]


class Restate:
    def __init__(
        self,
        binary: Path,
        workdir: Path,
        port_base: int,
        db: Path,
        handler: str = "run",
        module: str = "bench.peers.restate_app",
        service: str = "E2E",
        service_env: dict[str, str] | None = None,
        server_env: dict[str, str] | None = None,
    ) -> None:
        """``module`` serves ``service`` (``python -m module PORT``), with ``service_env`` added to
        its environment (bench/peers/agent_restate.py runs its agent service so); ``server_env``
        is added to restate-server's (``RESTATE_*`` settings: none by default, the server's own
        defaults as an operator starts it; docs/benchmarks.md says which and why)."""
        server_env = server_env or {}
        self.workdir, self.db, self.handler = workdir, db, handler
        self.module, self.service_name, self.service_env = module, service, service_env or {}
        for port in (port_base, port_base + 1, port_base + 2, port_base + 10):
            _port_free(port)
        self.ingress = f"http://127.0.0.1:{port_base}"
        self.admin = f"http://127.0.0.1:{port_base + 1}"
        self.service_port = port_base + 10
        env = {
            **os.environ,
            "RESTATE_INGRESS__BIND_PORT": str(port_base),
            "RESTATE_ADMIN__BIND_PORT": str(port_base + 1),
            "RESTATE_BIND_PORT": str(port_base + 2),
            **server_env,
        }
        self.server = subprocess.Popen(
            [str(binary), "--no-logo", "--listen-mode", "tcp", "--base-dir", str(workdir / "restate-data")],
            env=env,
            stdout=(workdir / "restate-server.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        self.service = self.start_service(victim=True)
        self.http = httpx.Client(timeout=120)
        self._wait_up(f"{self.admin}/health")
        self._wait_up(f"{self.ingress}/restate/health")
        self._register()

    def start_service(self, victim: bool) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.module,
                str(self.service_port),
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "E2E_DB": str(self.db),
                "E2E_CRASH_VICTIM": "1" if victim else "0",
                **self.service_env,
            },
            stdout=(self.workdir / "restate-service.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def _wait_up(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.server.poll() is not None:
                raise SystemExit(f"restate-server not up at {url}: see {self.workdir}/restate-server.log")
            time.sleep(0.1)

    def _register(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:  # the service process may still be importing
            answer = self.http.post(
                f"{self.admin}/deployments", json={"uri": f"http://127.0.0.1:{self.service_port}"}
            )
            if answer.status_code < 300:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"registering the service failed: {answer.status_code} {answer.text}")
            time.sleep(0.2)

    def send(self, run: str) -> str:
        answer = self.http.post(f"{self.ingress}/{self.service_name}/{self.handler}/send", json={"run": run})
        answer.raise_for_status()
        return str(answer.json()["invocationId"])

    def attach(self, invocation: str) -> Any:
        answer = self.http.get(f"{self.ingress}/restate/invocation/{invocation}/attach")
        answer.raise_for_status()
        return answer.json()

    async def attach_all(self, invocations: list[str]) -> None:
        limits = httpx.Limits(max_connections=len(invocations), max_keepalive_connections=len(invocations))
        async with httpx.AsyncClient(timeout=600, limits=limits) as http:

            async def one(invocation: str) -> None:
                answer = await http.get(f"{self.ingress}/restate/invocation/{invocation}/attach")
                answer.raise_for_status()

            await asyncio.gather(*(one(i) for i in invocations))

    def close(self) -> None:
        self.http.close()
        for process in (self.service, self.server):
            process.send_signal(signal.SIGTERM)
        for process in (self.service, self.server):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _port_free(port: int) -> None:
    """A server left listening on a port of ours (a killed benchmark's) would answer for the one
    started here -- its figures measured on the wrong process: stop instead, naming the port."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(f"port {port} is in use: stop what listens there or pass another --port-base")


def new_run() -> str:
    return uuid.uuid4().hex[:20]


def measure(restate: Restate, l_runs: int, t_runs: int, workload: str, idle_s: float = 0.5) -> dict[str, Any]:
    for _ in range(3):  # first use of every code path, on both sides
        restate.attach(restate.send(new_run()))
    singles = []
    for _ in range(l_runs):
        time.sleep(idle_s)
        submitted = time.time()
        restate.attach(restate.send(new_run()))
        singles.append((time.time() - submitted) * 1000 / STEPS)
    warm = [restate.send(new_run()) for _ in range(24)]
    asyncio.run(restate.attach_all(warm))
    time.sleep(1)
    pids = [restate.server.pid, restate.service.pid]
    cpu_before = total(pids)
    started = time.time()
    invocations = [restate.send(new_run()) for _ in range(t_runs)]
    asyncio.run(restate.attach_all(invocations))
    elapsed = time.time() - started
    cpu = total(pids) - cpu_before
    # R: the service process dies (SIGKILL) in step 31's tool call; a fresh one is started.
    run = crash_run(new_run())
    invocation = restate.send(run)
    wait_in_crash_step(str(restate.db), run)  # its 31st tool call has started, and hangs
    restate.service.kill()
    restate.service.wait()
    server_before = total([restate.server.pid])
    restarted = time.time()
    restate.service = restate.start_service(victim=False)
    result = restate.attach(invocation)
    recovered = time.time() - restarted
    # the fresh service process's CPU since its start, and the server's over the same stretch
    recovery_cpu = total([restate.service.pid]) + total([restate.server.pid]) - server_before
    assert result == {"run": run, "steps": STEPS}, result
    return {
        "system": "restate",
        "workload": workload,
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
        **recovery(recovered, recovery_cpu, str(restate.db), run, workload),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--port-base", type=int, default=29070)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    parser.add_argument("--workload", choices=("async", "sync"), default="async")
    parser.add_argument(
        "--h2-max-streams",
        type=int,
        help="the service's HTTP/2 stream limit (default: unbounded, as Restate's SDK serves; 100 is hypercorn's)",
    )
    parser.add_argument(
        "--rocksdb-memory",
        help="restate-server's rocksdb-total-memory-size (default: the server's own, 2 GiB in 1.7.12)",
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    handler = {"async": "run", "sync": "run_sync"}[args.workload]
    service_env, server_env = {}, {}
    if args.h2_max_streams is not None:
        service_env["E2E_H2_MAX_STREAMS"] = str(args.h2_max_streams)
    if args.rocksdb_memory is not None:
        server_env["RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE"] = args.rocksdb_memory
    restate = Restate(
        args.binary,
        args.workdir,
        args.port_base,
        args.workdir / "e2e.db",
        handler,
        service_env=service_env,
        server_env=server_env,
    )
    try:
        print(json.dumps(measure(restate, args.l_runs, args.t_runs, args.workload)), flush=True)
    finally:
        restate.close()


if __name__ == "__main__":
    main()
