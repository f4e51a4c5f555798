"""L, T, CPU, R and B of the framework-agent workload on agentlog (bench/compare_agents.py), as
bench/peers/agentlog_bench.py measures the e2e workloads: one worker process
(bench/peers/agent_agentlog_app.py) on a fresh deployment of 12 partitions, one ``Client``.

L, T, CPU and R as agentlog_bench.py's (R cold: the worker SIGKILLed in the crash run's 31st tool
call, a fresh process started; the clock starts once the killed one is reaped).
B  bytes a step the log stores for a run: the key + value of every record of the run (keyed by
   its run id) on the events topic and the payloads topic (results and messages stored out of
   line), over 40 -- median of the L runs. The checkpoints topic (compacted snapshots, rebuilt
   from the events) is not counted.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from _deploy import fresh_deployment, start_worker

from bench.peers.agent_workload import STEPS
from bench.peers.agentlog_bench import _checked, _stop, crash_at_step_31
from bench.peers.cpu import cpu_seconds
from bench.peers.figures import latency_and_throughput
from infra.topics import drop_topics
from runtime.client import Client, new_run_id
from runtime.config import Settings
from runtime.log.kafka.reader import read_partition

APP = "bench.peers.agent_agentlog_app:app"
WORKFLOW = "agent"


def _worker(settings: Settings, workdir: Path, db: Path, victim: str) -> subprocess.Popen[bytes]:
    return start_worker(
        settings,
        "agents-0",
        workdir / "agentlog-worker.log",
        app=APP,
        E2E_DB=str(db),
        E2E_CRASH_VICTIM=victim,
    )


def _submit(client: Client) -> str:
    return client.submit(WORKFLOW, {"run": (run := new_run_id())}, run_id=run).run_id


def stored_bytes(settings: Settings, run_ids: set[str]) -> dict[str, int]:
    """Key + value bytes of each run's records on the events and payloads topics."""
    keys = {run.encode(): run for run in run_ids}
    found = dict.fromkeys(run_ids, 0)
    for topic in (settings.events_topic, settings.payloads_topic):
        for partition in range(settings.partitions):
            for record in read_partition(settings, topic, partition, keep=lambda k: k in keys):
                found[keys[record.key or b""]] += len(record.key or b"") + len(record.value or b"")
    return found


def measure(workdir: Path, l_runs: int, t_runs: int, idle_s: float = 0.5) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    settings = fresh_deployment(partitions=12, prefix="agents")
    db = workdir / "e2e.db"
    worker = _worker(settings, workdir, db, "1")
    client = Client(settings)
    try:
        for _ in range(3):  # the worker joins, claims its partitions and warms its code paths
            client.run(_submit(client)).result(timeout=120)
        singles, measured = [], []
        for _ in range(l_runs):
            time.sleep(idle_s)
            started = time.time()
            measured.append(run_id := _submit(client))
            client.run(run_id).result(timeout=120)
            singles.append((time.time() - started) * 1000 / STEPS)
        client.results([_submit(client) for _ in range(24)], timeout=600)
        time.sleep(1)
        cpu_before = cpu_seconds(worker.pid)
        started = time.time()
        client.results([_submit(client) for _ in range(t_runs)], timeout=1800)
        elapsed = time.time() - started
        cpu = cpu_seconds(worker.pid) - cpu_before
        sizes = stored_bytes(settings, set(measured))
        # R cold: the worker dies (SIGKILL) in step 31's tool call; a fresh process takes over.
        run, run_id = crash_at_step_31(client, WORKFLOW, db)
        worker.kill()
        worker.wait()
        restarted = time.time()
        worker = _worker(settings, workdir, db, "0")
        answer = client.run(run_id).result(timeout=300)
        recovered = time.time() - restarted
        recovery_cpu = cpu_seconds(worker.pid)
        counts = _checked("sync", db, run, answer, "R")
    finally:
        client.close()
        _stop(worker)
        drop_topics(settings)
    return {
        "system": "agentlog",
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
        "R_s": round(recovered, 3),
        "R_cpu_s": round(recovery_cpu, 3),
        **counts,
        "B_per_step": round(statistics.median(sizes.values()) / STEPS, 1),
    }
