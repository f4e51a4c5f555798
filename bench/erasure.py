"""The cost of sealing run contents (``seal_contents``, crypto-shredding; docs/erasure.md). Prints JSON lines.

S  worker CPU per step (user+sys, us) of the refund-40 agent, 100 runs submitted at once to one
   worker process, contents in the clear and sealed, alternated (plain, sealed, plain, sealed) in
   one sitting so both meet the same machine load; each after 24 warm-up runs. The ratio of the
   medians is the figure to compare with the budget: sealed <= 1.10 x plain.

Run: `python bench/erasure.py` (services up).
"""

from __future__ import annotations

import json
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


def cpu_per_step(sealed: bool, workdir: Path, n: int = RUNS) -> float:
    settings = fresh_deployment(partitions=4).model_copy(update={"seal_contents": sealed})
    worker = start_worker(settings, "bench-seal", workdir / f"worker-{sealed}-{time.time()}.log")
    try:
        with Client(settings) as client:
            warm_up(settings, client)
            before = high_watermarks(settings)
            cpu_before = cpu_seconds([worker.pid])
            for i in range(n):
                client.submit("refund", {"order": f"bulk-{i}"})
            client.flush()
            wait_quiet(settings, before + n * 160, timeout=600)
            return (cpu_seconds([worker.pid]) - cpu_before) / (n * STEPS) * 1e6
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main() -> None:
    figures: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ROUNDS):
            for sealed in (False, True):
                us = cpu_per_step(sealed, Path(tmp))
                figures[sealed].append(us)
                emit(metric="S", sealed=sealed, worker_cpu_us_per_step=round(us, 1), runs=RUNS, steps=STEPS)
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
