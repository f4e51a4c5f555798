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
   (``R_s``: the clock starts once the killed process is reaped, just before the new one is
   spawned, so the time a process manager takes to notice a death and start a process is not in it)
R CPU  s of CPU the fresh process used from its start to the result (``R_cpu_s``; the respawned
   child's since its fork, ``R_respawn_cpu_s``): what a recovery costs whatever else the machine
   runs (the broker's CPU is not counted)
R respawn  s from the SIGKILL itself to ``Client.result`` returning, with the worker run as
   ``agentlog worker --respawn`` (runtime/worker/supervisor.py) and its forked child killed in the
   run's 31st tool call (``R_respawn_s``). The clock starts at the kill, not at the new child's
   start: the supervisor's noticing the death (waitpid) and forking are in it, so nothing a
   process manager would add is left out. Its child starts with every module imported and every
   schema id resolved (the supervisor did both before its first fork); it still joins the group,
   claims, rebuilds and replays like a cold worker.
On the sync workload, each recovery's line carries the counters of bench/peers/workload.py's
``replay_counts`` (``R_*`` for the cold recovery, ``R_respawn_*`` for the respawn); a model call of
steps 1-30 made again or an effect applied twice ends the benchmark with an error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from _deploy import fresh_deployment, start_worker

from bench.peers.cpu import cpu_seconds
from bench.peers.figures import latency_and_throughput
from bench.peers.workload import STEPS, crash_run, replay_counts, steps_done, wait_in_crash_step
from infra.topics import drop_topics
from runtime.client import Client, new_run_id
from runtime.config import Settings

APP = "bench.e2e_app:app"
WORKFLOWS = {"async": "e2e", "sync": "e2e-sync"}
WORKER_ID = "e2e-0"


def _worker(
    settings: Settings,
    workdir: Path,
    db: Path,
    victim: str,
    *args: str,
    log: str = "agentlog-worker.log",
    app: str = APP,
    **env: str,
) -> subprocess.Popen[bytes]:
    """A worker process; ``victim`` is E2E_CRASH_VICTIM (bench/peers/workload.py: "1", "once", "0")."""
    return start_worker(
        settings, WORKER_ID, workdir / log, *args, app=app, E2E_DB=str(db), E2E_CRASH_VICTIM=victim, **env
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _warm(client: Client, workflow: str, runs: int = 3) -> None:
    """A few runs: the worker joins, claims its partitions and warms its code paths."""
    for _ in range(runs):
        client.submit(workflow, {"run": (run := new_run_id())}, run_id=run).result(timeout=120)


def crash_at_step_31(client: Client, workflow: str, db: Path) -> tuple[str, str]:
    """Submit a crash run and wait until its 31st tool call has started (and hangs) in the victim
    process; the run's name in the tool's rows and its run id."""
    run = crash_run(new_run_id())
    run_id = client.submit(workflow, {"run": run}).run_id
    client.flush()
    wait_in_crash_step(str(db), run)
    return run, run_id


def child_of(supervisor: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """The pid of the worker ``agentlog worker --respawn`` has forked (Linux: /proc)."""
    path = Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = path.read_text().split()
        if len(children) == 1:
            return int(children[0])
        time.sleep(0.01)
    raise SystemExit(f"agentlog worker --respawn (pid {supervisor.pid}) has no single child")


def _checked(workload: str, db: Path, run: str, result: Any, prefix: str) -> dict[str, Any]:
    """The recovery's counters (sync workload); a correctness failure ends the benchmark."""
    if result != {"run": run, "steps": STEPS}:
        raise SystemExit(f"{prefix}: the crashed run's result is {result!r}")
    found: dict[str, Any] = {f"{prefix}_tool_calls": steps_done(str(db), run)}
    if workload == "sync":
        counts = replay_counts(str(db), run)
        if counts["R_model_reruns"] or counts["R_duplicate_effects"]:
            raise SystemExit(f"{prefix}: the recovery re-did what it must not: {counts}")
        found.update({key.replace("R_", f"{prefix}_", 1): value for key, value in counts.items()})
    return found


def recover_cold(
    settings: Settings, workdir: Path, db: Path, client: Client, workload: str, victim: subprocess.Popen[bytes]
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    """R cold: ``victim`` killed in the crash run's 31st tool call, a fresh process started; the
    figures and the fresh process."""
    run, run_id = crash_at_step_31(client, WORKFLOWS[workload], db)
    victim.kill()
    victim.wait()
    started = time.time()
    successor = _worker(settings, workdir, db, "0")
    result = client.run(run_id).result(timeout=120)
    recovered = time.time() - started
    cpu = cpu_seconds(successor.pid)  # all of it spent since its start
    return {
        "R_s": round(recovered, 3),
        "R_cpu_s": round(cpu, 3),
        **_checked(workload, db, run, result, "R"),
    }, successor


def recover_respawn(db: Path, client: Client, workload: str, supervisor: subprocess.Popen[bytes]) -> dict[str, Any]:
    """R respawn: the child of ``supervisor`` (``agentlog worker --respawn``, E2E_CRASH_VICTIM=once)
    killed in the crash run's 31st tool call; from the kill to the result."""
    run, run_id = crash_at_step_31(client, WORKFLOWS[workload], db)
    child = child_of(supervisor)
    os.kill(child, signal.SIGKILL)
    killed = time.time()
    result = client.run(run_id).result(timeout=120)
    recovered = time.time() - killed
    if supervisor.poll() is not None:
        raise SystemExit(f"agentlog worker --respawn exited ({supervisor.returncode}) instead of respawning")
    cpu = cpu_seconds(child_of(supervisor))  # the new child's, since its fork
    return {
        "R_respawn_s": round(recovered, 3),
        "R_respawn_cpu_s": round(cpu, 3),
        **_checked(workload, db, run, result, "R_respawn"),
    }


def measure(
    workdir: Path, l_runs: int, t_runs: int, workload: str = "async", idle_s: float = 0.5
) -> dict[str, Any]:
    workflow = WORKFLOWS[workload]
    workdir.mkdir(parents=True, exist_ok=True)
    settings = fresh_deployment(partitions=12, prefix="compare")
    db = workdir / "e2e.db"
    worker = _worker(settings, workdir, db, "1")
    client = Client(settings)
    try:
        _warm(client, workflow)
        singles = []
        for _ in range(l_runs):
            time.sleep(idle_s)
            run = new_run_id()
            started = time.time()
            client.submit(workflow, {"run": run}, run_id=run)
            client.run(run).result(timeout=120)
            singles.append((time.time() - started) * 1000 / STEPS)
        warm = [client.submit(workflow, {"run": (run := new_run_id())}, run_id=run).run_id for _ in range(24)]
        client.results(warm, timeout=600)
        time.sleep(1)
        cpu_before = cpu_seconds(worker.pid)
        started = time.time()
        runs = [client.submit(workflow, {"run": (run := new_run_id())}, run_id=run).run_id for _ in range(t_runs)]
        client.results(runs, timeout=1200)
        elapsed = time.time() - started
        cpu = cpu_seconds(worker.pid) - cpu_before
        # R cold: the worker dies (SIGKILL) in step 31's tool call; a fresh process takes over.
        cold, worker = recover_cold(settings, workdir, db, client, workload, worker)
        # R respawn: the same deployment, served by `agentlog worker --respawn` (same worker id).
        _stop(worker)
        worker = _worker(settings, workdir, db, "once", "--respawn", log="agentlog-respawn.log")
        _warm(client, workflow)
        respawned = recover_respawn(db, client, workload, worker)
    finally:
        client.close()
        _stop(worker)
        drop_topics(settings)  # the next round's broker does not carry this one's partitions
    return {
        "system": "agentlog",
        "workload": workload,
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
        **cold,
        **respawned,
    }
