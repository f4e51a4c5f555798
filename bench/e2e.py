"""End-to-end figures: what a user's program sees, ``Client.submit`` until ``Client.result``.

The agent is bench/e2e_app.py: 40 steps of a scripted model call and a sync tool that commits one
SQLite row. Printed (JSON lines, ``mode: "e2e"``):

E2E-L  ms per step of one run on an idle worker, submit -> result / 40 (median of 5), and its
       parts (medians): submit -> first model call, first model call -> last tool call per step,
       last tool call -> result returned
E2E-T  steps/s of 200 runs submitted at once, first submit -> last result (and the same measured
       at the tools: first submit -> last tool call)

Works against older clients too (no ``Client.results``: one ``result`` after another), so the
same script measures a baseline checkout.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from _deploy import start_worker

from runtime.client import Client, new_run_id
from runtime.config import Settings

STEPS = 40
APP = "bench.e2e_app:app"


def emit(**fields: Any) -> None:
    print(json.dumps({"mode": "e2e", **fields}), flush=True)


def _times(db: Path, run: str) -> tuple[float, float]:
    """(first model call, last tool call) of ``run``, wall seconds."""
    with sqlite3.connect(db, timeout=30) as conn:
        first = conn.execute("SELECT at FROM first_model_calls WHERE run = ?", (run,)).fetchone()[0]
        last = conn.execute("SELECT MAX(at) FROM tool_calls WHERE run = ?", (run,)).fetchone()[0]
    return float(first), float(last)


def _one(client: Client, db: Path) -> dict[str, float]:
    run = new_run_id()
    submitted = time.time()
    client.submit("e2e", {"run": run}, run_id=run)
    _result(client, run, 120)
    answered = time.time()
    first, last = _times(db, run)
    return {
        "ms_per_step": (answered - submitted) * 1000 / STEPS,
        "submit_to_first_call_ms": (first - submitted) * 1000,
        "first_call_to_last_call_ms_per_step": (last - first) * 1000 / STEPS,
        "last_call_to_result_ms": (answered - last) * 1000,
    }


def _result(client: Client, run: str, timeout: float) -> Any:
    """The run's result through its handle -- or, from a baseline checkout older than the handles,
    ``Client.result(run_id)``."""
    handle = getattr(client, "run", None)
    if handle is None:
        return getattr(client, "result")(run, timeout=timeout)  # noqa: B009 -- absent from this Client
    return handle(run).result(timeout=timeout)


def _wait_all(client: Client, runs: list[str]) -> None:
    many = getattr(client, "results", None)
    if many is not None:
        many(runs, timeout=600)
    else:
        for run in runs:
            _result(client, run, 600)


def bench_e2e(
    settings: Settings, workdir: Path, idle_s: float = 0.5, l_runs: int = 5, t_runs: int = 200
) -> None:
    db = workdir / "e2e.db"
    worker = start_worker(settings, "e2e-0", workdir / "e2e-worker.log", app=APP, E2E_DB=str(db))
    client = Client(settings)
    try:
        for _ in range(3):  # the worker joins, claims its partitions and warms its code paths
            client.submit("e2e", {"run": (run := new_run_id())}, run_id=run)
            _result(client, run, 120)
        singles = []
        for _ in range(l_runs):
            time.sleep(idle_s)  # the worker is idle when the submission arrives
            singles.append(_one(client, db))
        emit(
            metric="E2E-L",
            unit="ms/step",
            median=round(statistics.median(s["ms_per_step"] for s in singles), 3),
            runs=[round(s["ms_per_step"], 3) for s in singles],
            **{
                key: round(statistics.median(s[key] for s in singles), 3)
                for key in (
                    "submit_to_first_call_ms",
                    "first_call_to_last_call_ms_per_step",
                    "last_call_to_result_ms",
                )
            },
            target="<= 3.0",
        )
        warm = [new_run_id() for _ in range(24)]  # warm-up, as before the in-worker T
        for run in warm:
            client.submit("e2e", {"run": run}, run_id=run)
        _wait_all(client, warm)
        time.sleep(1)
        runs = [new_run_id() for _ in range(t_runs)]
        started = time.time()
        for run in runs:
            client.submit("e2e", {"run": run}, run_id=run)
        _wait_all(client, runs)
        answered = time.time()
        with sqlite3.connect(db, timeout=30) as conn:
            placeholders = ",".join("?" * len(runs))
            last_tool = conn.execute(
                f"SELECT MAX(at) FROM tool_calls WHERE run IN ({placeholders})", runs
            ).fetchone()[0]
        emit(
            metric="E2E-T",
            unit="steps/s",
            value=round(t_runs * STEPS / (answered - started)),
            at_the_tools=round(t_runs * STEPS / (last_tool - started)),
            runs=t_runs,
            seconds=round(answered - started, 3),
            results_api="Client.results" if hasattr(client, "results") else "Client.result per run",
            target=">= 2500",
        )
    finally:
        client.close()
        worker.terminate()
        worker.wait(timeout=30)
