"""The cost of sealing run contents (``seal_contents``, crypto-shredding; docs/erasure.md). Prints JSON lines.

S  worker CPU per step (user+sys, us) of the refund-40 agent, 100 runs submitted at once to one
   worker process, contents in the clear and sealed, alternated (plain, sealed, plain, sealed) in
   one sitting so both meet the same machine load; each after 24 warm-up runs. The ratio of the
   medians is the figure to compare with the budget: sealed <= 1.10 x plain.

Run: `python bench/erasure.py [--rounds N]` (services up; N alternations, 2 by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker
from refund40 import STEPS, cpu_seconds, high_watermarks, wait_quiet, warm_up

from runtime.client import Client

RUNS = 100
ROUNDS = 2


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main_thread_seconds(pid: int) -> float:
    """User+system CPU of the process's main thread (the worker's event loop), without
    librdkafka's threads: how much of a difference is Python's."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_step(sealed: bool, workdir: Path, n: int = RUNS) -> tuple[float, float]:
    settings = fresh_deployment(partitions=4).model_copy(update={"seal_contents": sealed})
    worker = start_worker(settings, "bench-seal", workdir / f"worker-{sealed}-{time.time()}.log")
    try:
        with Client(settings) as client:
            warm_up(settings, client)
            before = high_watermarks(settings)
            cpu_before, loop_before = cpu_seconds([worker.pid]), main_thread_seconds(worker.pid)
            for i in range(n):
                client.submit("refund", {"order": f"bulk-{i}"})
            client.flush()
            wait_quiet(settings, before + n * 160, timeout=600)
            per_step = 1e6 / (n * STEPS)
            loop = (main_thread_seconds(worker.pid) - loop_before) * per_step
            return (cpu_seconds([worker.pid]) - cpu_before) * per_step, loop
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description="worker CPU per step, contents plain and sealed")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="alternations of plain and sealed")
    rounds = parser.parse_args().rounds
    figures: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for sealed in (False, True):
                us, loop = cpu_per_step(sealed, Path(tmp))
                figures[sealed].append(us)
                emit(
                    metric="S",
                    sealed=sealed,
                    worker_cpu_us_per_step=round(us, 1),
                    main_thread_us_per_step=round(loop, 1),
                    runs=RUNS,
                    steps=STEPS,
                )
    plain, sealed = statistics.median(figures[False]), statistics.median(figures[True])
    emit(
        metric="S",
        unit="ratio",
        plain_us_per_step=round(plain, 1),
        sealed_us_per_step=round(sealed, 1),
        value=round(sealed / plain, 3),
        target="<= 1.10",
    )


if __name__ == "__main__":
    main()
