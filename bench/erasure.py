"""The cost of sealing run contents (``seal_contents``, crypto-shredding; docs/erasure.md). Prints JSON lines.

S  worker CPU per step (user+sys, us), contents in the clear and sealed, alternated (plain, sealed,
   plain, sealed) in one sitting so both meet the same machine load; each measurement is 100 runs
   submitted at once to one worker process, after 24 warm-up runs. The ratio of the medians is the
   figure to compare with the budget: sealed <= 1.10 x plain. Per workload:
   - ``e2e``, ``e2e-sync``: the comparison's workloads (bench/peers/workload.py), each step a model
     call and a tool that commits a SQLite row (the sync one: a sync model that commits one too);
   - ``e2e-openai``: as ``e2e``, with the model called through the official ``openai`` SDK
     (runtime.models.openai) at an OpenAI-compatible endpoint on 127.0.0.1 in a process of its own
     (bench/model_server.py) -- how a user's agent calls a model, the endpoint's CPU not counted;
   - ``refund40``: the refund demo with its world in memory -- a scripted model and tools that do
     no work, so the worker's own bookkeeping is nearly all of a step and sealing's share is at its
     largest.
T  with ``--time-seals``, after the rounds: one more sealed measurement per workload whose worker
   times its sealing calls (bench/seal_timing.py): calls a step, us a call and us a step inside a
   busy worker. Its timer's clock reads are in it, so its worker CPU is not one for the ratio.

Run: `python bench/erasure.py [--rounds N] [--runs R] [--workload W ...] [--time-seals]` (services up;
N alternations, 3 by default).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import seal_timing
from _deploy import fresh_deployment, start_worker
from refund40 import STEPS, cpu_seconds

from runtime.client import Client, new_run_id

RUNS = 100
WARM_UP_RUNS = 24
ROUNDS = 3


@dataclass(frozen=True)
class Workload:
    app: str
    workflow: str
    world: bool  # a SQLite file the tools write (E2E_DB)
    endpoint: bool = False  # an OpenAI-compatible model endpoint (E2E_MODEL_URL)

    def request(self, tag: str) -> dict[str, Any]:
        """The run's input, naming it by ``tag`` (the e2e tools write it in their rows)."""
        return {"run": tag} if self.world else {"order": tag}


WORKLOADS = {
    "e2e": Workload("bench.e2e_app:app", "e2e", world=True),
    "e2e-sync": Workload("bench.e2e_app:app", "e2e-sync", world=True),
    "e2e-openai": Workload("bench.e2e_app:app", "e2e-openai", world=True, endpoint=True),
    "refund40": Workload("examples.refund_agent:app", "refund", world=False),
}


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main_thread_seconds(pid: int) -> float:
    """User+system CPU of the process's main thread (the worker's event loop), without
    librdkafka's threads: how much of a difference is Python's."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submit_all(client: Client, workload: Workload, n: int) -> None:
    """``n`` runs submitted at once; returns when the client has every result. The run ids are
    drawn by the client, as ``submit`` does without one: a given id makes a sealing client read
    its key's partition first (a round trip per submission, docs/erasure.md), which spaces the
    submissions out -- and a worker handed runs one by one batches less and spends more per step
    for that, sealed or not, so the two halves would not meet the same load."""
    runs = [client.submit(workload.workflow, workload.request(new_run_id())).run_id for _ in range(n)]
    client.results(runs, timeout=600)


@contextlib.contextmanager
def model_endpoint() -> Iterator[str]:
    """bench/model_server.py in a process of its own; yields its OpenAI base URL."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "model_server.py")], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.kill()
        server.wait(timeout=30)


@dataclass(frozen=True)
class Measured:
    us: float  # worker CPU per step
    loop_us: float  # of it, the main thread's (the event loop)
    seals: tuple[int, int] = (0, 0)  # timed sealing calls and their ns (``timing``), in the stretch


def cpu_per_step(workload: Workload, sealed: bool, workdir: Path, n: int, timing: bool = False) -> Measured:
    """``timing``: the worker is bench/seal_timing.py's, whose sealing calls are timed (their
    figure includes its clock reads, so it is not one for the ratio)."""
    tag = f"{workload.workflow}-{sealed}-{time.time()}"
    timings = workdir / f"{tag}.seals" if timing else None
    world: dict[str, str] = {}
    if workload.world:
        world["E2E_DB"] = str(workdir / f"{tag}.db")
    if timings is not None:
        world["SEAL_TIMING_FILE"] = str(timings)
    settings = fresh_deployment(partitions=4).model_copy(update={"seal_contents": sealed})
    with contextlib.ExitStack() as stack:
        if workload.endpoint:
            world["E2E_MODEL_URL"] = stack.enter_context(model_endpoint())
        module = "runtime.cli" if timings is None else "bench.seal_timing"
        worker = start_worker(
            settings, "bench-seal", workdir / f"{tag}.log", app=workload.app, module=module, **world
        )
        stack.callback(worker.wait, timeout=30)
        stack.callback(worker.terminate)
        client = stack.enter_context(Client(settings))
        # A fresh process's first steps pay for first use (imports, compiled encoders, keys).
        submit_all(client, workload, WARM_UP_RUNS)
        seals_before = seal_timing.read(timings) if timings else (0, 0)
        cpu_before, loop_before = cpu_seconds([worker.pid]), main_thread_seconds(worker.pid)
        submit_all(client, workload, n)
        per_step = 1e6 / (n * STEPS)
        loop = (main_thread_seconds(worker.pid) - loop_before) * per_step
        us = (cpu_seconds([worker.pid]) - cpu_before) * per_step
        seals_after = seal_timing.read(timings) if timings else (0, 0)
        return Measured(us, loop, (seals_after[0] - seals_before[0], seals_after[1] - seals_before[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description="worker CPU per step, contents plain and sealed")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="alternations of plain and sealed")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs per measurement")
    parser.add_argument(
        "--workload", action="append", choices=sorted(WORKLOADS), help="repeatable; all by default"
    )
    parser.add_argument(
        "--time-seals",
        action="store_true",
        help="then one more sealed measurement per workload, its sealing calls timed (T)",
    )
    args = parser.parse_args()
    names = args.workload or list(WORKLOADS)
    figures: dict[tuple[str, bool], list[float]] = {(w, s): [] for w in names for s in (False, True)}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name in names:
                for sealed in (False, True):
                    measured = cpu_per_step(WORKLOADS[name], sealed, Path(tmp), args.runs)
                    figures[name, sealed].append(measured.us)
                    emit(
                        metric="S",
                        workload=name,
                        sealed=sealed,
                        worker_cpu_us_per_step=round(measured.us, 1),
                        main_thread_us_per_step=round(measured.loop_us, 1),
                        runs=args.runs,
                        steps=STEPS,
                    )
        for name in names if args.time_seals else ():
            measured = cpu_per_step(WORKLOADS[name], True, Path(tmp), args.runs, timing=True)
            calls, ns = measured.seals
            emit(
                metric="T",
                workload=name,
                seal_calls_per_step=round(calls / (args.runs * STEPS), 2),
                us_per_seal_call=round(ns / max(calls, 1) / 1000, 2),
                seal_us_per_step=round(ns / (args.runs * STEPS) / 1000, 1),
                worker_cpu_us_per_step=round(measured.us, 1),
            )
    for name in names:
        plain, sealed = statistics.median(figures[name, False]), statistics.median(figures[name, True])
        emit(
            metric="S",
            unit="ratio",
            workload=name,
            plain_us_per_step=round(plain, 1),
            sealed_us_per_step=round(sealed, 1),
            value=round(sealed / plain, 3),
            target="<= 1.10",
        )


if __name__ == "__main__":
    main()
