"""L, T and R of the end-to-end workload on agentlog, measured as bench/peers/restate_bench.py
and bench/peers/dbos_bench.py measure theirs (bench/compare.py puts the three side by side).

One worker process (bench/e2e_app.py) on a fresh deployment, one ``Client``, running the workflow
of ``workload`` (bench/peers/workload.py: ``async`` is ``e2e``, ``sync`` is ``e2e-sync``):
L  ms per step of one run on an idle worker, submit -> result / 40 (median of ``l_runs``)
T  steps/s, ``t_runs`` runs submitted one after another, then awaited together
   (``Client.results``): first submit -> last result; CPU ms per step of the worker process
   over the same stretch (/proc: user + system; the Kafka broker's is not counted)
R  s from the start of a fresh worker process, after the one running the run was killed
   (SIGKILL) in its 31st tool call (bench/peers/workload.py), to ``Client.result`` returning
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from _deploy import fresh_deployment, start_worker

from bench.peers.cpu import cpu_seconds
from bench.peers.workload import CRASH_STEP, STEPS, crash_run, replay_counts, steps_done
from runtime.client import Client, new_run_id
from runtime.config import Settings

APP = "bench.e2e_app:app"
WORKFLOWS = {"async": "e2e", "sync": "e2e-sync"}


def _worker(settings: Settings, workdir: Path, db: Path, victim: bool) -> subprocess.Popen[bytes]:
    return start_worker(
        settings,
        "e2e-0",
        workdir / "agentlog-worker.log",
        app=APP,
        E2E_DB=str(db),
        E2E_CRASH_VICTIM="1" if victim else "0",
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def measure(
    workdir: Path, l_runs: int, t_runs: int, workload: str = "async", idle_s: float = 0.5
) -> dict[str, Any]:
    workflow = WORKFLOWS[workload]
    workdir.mkdir(parents=True, exist_ok=True)
    settings = fresh_deployment(partitions=12, prefix="compare")
    db = workdir / "e2e.db"
    worker = _worker(settings, workdir, db, victim=True)
    client = Client(settings)
    try:
        for _ in range(3):  # the worker joins, claims its partitions and warms its code paths
            client.result(client.submit(workflow, {"run": (run := new_run_id())}, run_id=run), timeout=120)
        singles = []
        for _ in range(l_runs):
            time.sleep(idle_s)
            run = new_run_id()
            started = time.time()
            client.submit(workflow, {"run": run}, run_id=run)
            client.result(run, timeout=120)
            singles.append((time.time() - started) * 1000 / STEPS)
        warm = [client.submit(workflow, {"run": (run := new_run_id())}, run_id=run) for _ in range(24)]
        client.results(warm, timeout=600)
        time.sleep(1)
        cpu_before = cpu_seconds(worker.pid)
        started = time.time()
        runs = [client.submit(workflow, {"run": (run := new_run_id())}, run_id=run) for _ in range(t_runs)]
        client.results(runs, timeout=1200)
        elapsed = time.time() - started
        cpu = cpu_seconds(worker.pid) - cpu_before
        # R: the worker dies (SIGKILL) in step 31's tool call; a fresh process takes over.
        run = crash_run(new_run_id())
        crash = client.submit(workflow, {"run": run})
        client.flush()
        deadline = time.monotonic() + 120
        while steps_done(str(db), run) < CRASH_STEP - 1:
            if time.monotonic() > deadline:
                raise SystemExit("the crash run never reached step 30")
            time.sleep(0.005)
        worker.kill()
        worker.wait()
        restarted = time.time()
        worker = _worker(settings, workdir, db, victim=False)
        result = client.result(crash, timeout=120)
        recovered = time.time() - restarted
        assert result == {"run": run, "steps": STEPS}, result
    finally:
        client.close()
        _stop(worker)
    return {
        "system": "agentlog",
        "workload": workload,
        "L_ms_per_step": round(statistics.median(singles), 3),
        "L_runs": [round(x, 3) for x in singles],
        "T_steps_per_s": round(t_runs * STEPS / elapsed),
        "T_runs": t_runs,
        "CPU_ms_per_step": round(cpu * 1000 / (t_runs * STEPS), 3),
        "R_s": round(recovered, 3),
        "R_tool_calls": steps_done(str(db), run),
        **(replay_counts(str(db), run) if workload == "sync" else {}),
    }
