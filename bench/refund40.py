"""Benchmark of the refund-40 agent on the real services. Prints JSON lines.

L  ms per step, one run at a time, warm worker (median of 5 runs)
T  steps/s, 200 runs submitted at once: to one worker process, then to one per core (each
   measurement after 24 warm-up runs: a fresh process's first steps pay for first use), with
   the workers' CPU per step (user+sys), the figure to compare on a machine with other load
R  s from the restart of a worker killed (SIGKILL) when step 31's model call started, to the
   run's completion -- with the counts that prove it (re-executed model calls, effects, in doubt)
B  log bytes per step (Avro key+value of the run's records, and on-disk segment bytes)
and, in the same run, the Kafka floors: transactional and idempotent produce on this machine.

With ``--e2e``, also the end-to-end figures of bench/e2e.py (client submit -> result, tools that
commit a SQLite row per call), printed beside these and the floors of the same run.

Run: `make bench` (services up) or `python bench/refund40.py [--e2e]`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker
from confluent_kafka import Consumer, TopicPartition
from e2e import bench_e2e
from kafka_floor import (
    floor_topic_for,
    idempotent_latency,
    transactional_latency,
    transactional_throughput,
)

from infra.kafka import data_dir
from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.config import reader_config
from runtime.log.kafka.reader import read_partition
from runtime.log.records.events import RunCompleted, RunStarted
from runtime.log.schemas.serde import Serde

STEPS = 40


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


_offsets: dict[str, Consumer] = {}


def high_watermarks(settings: Settings) -> int:
    """Sum of the events topic's end offsets (one long-lived consumer: a new one per poll would
    load the machine the benchmark is measuring)."""
    consumer = _offsets.get(settings.events_topic)
    if consumer is None:
        consumer = _offsets[settings.events_topic] = Consumer(reader_config(settings))
    return sum(
        consumer.get_watermark_offsets(TopicPartition(settings.events_topic, p), timeout=10, cached=False)[1]
        for p in range(settings.partitions)
    )


def wait_quiet(settings: Settings, minimum: int, timeout: float = 300) -> None:
    """Wait until the events topic stops growing (polling offsets costs the worker no CPU)."""
    deadline = time.monotonic() + timeout
    last, still = -1, 0
    while time.monotonic() < deadline:
        now = high_watermarks(settings)
        still = still + 1 if now == last and now >= minimum else 0
        if still >= 2:
            return
        last = now
        time.sleep(0.25)
    raise SystemExit("timed out waiting for the worker")


def run_events(settings: Settings, serde: Serde, run_ids: set[str]) -> dict[str, list[tuple[int, Any]]]:
    """Every event of the given runs, by run, with its key+value size."""
    keys = {r.encode() for r in run_ids}
    found: dict[str, list[tuple[int, Any]]] = {r: [] for r in run_ids}
    for partition in range(settings.partitions):
        for record in read_partition(settings, settings.events_topic, partition, keep=lambda k: k in keys):
            event = serde.decode(record.value or b"", record.key)
            found[event.run_id].append((len(record.value or b"") + len(record.key or b""), event))
    return found


def duration_ms(events: list[tuple[int, Any]]) -> float:
    started = next(e for _, e in events if isinstance(e, RunStarted))
    done = next(e for _, e in events if isinstance(e, RunCompleted))
    return float(done.occurred_at - started.occurred_at)


def segment_bytes(settings: Settings) -> int:
    root = data_dir(settings)
    return sum(f.stat().st_size for d in root.glob(f"{settings.events_topic}-*") for f in d.glob("*.log"))


def bench_latency_and_bytes(settings: Settings, serde: Serde, client: Client) -> None:
    warm = client.submit("refund", {"order": "warm-up"}).run_id
    client.flush()
    wait_quiet(settings, 1)
    runs = []
    for i in range(5):
        runs.append(client.submit("refund", {"order": f"48211-{i}"}).run_id)
        client.flush()
        wait_quiet(settings, 1)
    events = run_events(settings, serde, {warm, *runs})
    per_step = [duration_ms(events[r]) / STEPS for r in runs]
    emit(
        metric="L",
        unit="ms/step",
        median=round(statistics.median(per_step), 3),
        runs=[round(x, 3) for x in per_step],
        target="<= 3.5",
    )
    logical = statistics.median(sum(size for size, _ in events[r]) / STEPS for r in runs)
    emit(
        metric="B",
        unit="bytes/step",
        avro_key_plus_value=round(logical, 1),
        records_per_step=round(len(events[runs[0]]) / STEPS, 2),
        on_disk_segment_bytes_per_step=round(segment_bytes(settings) / (STEPS * (len(runs) + 1)), 1),
        target="<= 450",
    )


def warm_up(settings: Settings, client: Client, n: int = 24) -> None:
    """A few runs through freshly started worker processes before T: their first steps pay for
    first-use imports and code paths (and, on a broker started a minute ago, its JIT)."""
    before = high_watermarks(settings)
    for i in range(n):
        client.submit("refund", {"order": f"warm-{i}"})
    client.flush()
    wait_quiet(settings, before + n * 160)


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU the processes have used (Linux /proc): the worker's cost per step, which a
    machine shared with other load changes far less than it changes steps/s."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def bench_throughput(
    settings: Settings, serde: Serde, client: Client, processes: int, pids: list[int], n: int = 0
) -> None:
    # BENCH_T_RUNS: more runs than the default 200, for a CPU figure less at the mercy of a noisy machine
    n = n or int(os.environ.get("BENCH_T_RUNS", "200"))
    before = high_watermarks(settings)
    cpu_before = cpu_seconds(pids)
    started = time.time()
    runs = [client.submit("refund", {"order": f"bulk-{i}"}).run_id for i in range(n)]
    client.flush()
    submitted = time.time() - started
    wait_quiet(settings, before + n * 160, timeout=600)
    events = run_events(settings, serde, set(runs))
    done = [next(e for _, e in ev if isinstance(e, RunCompleted)) for ev in events.values()]
    assert len(done) == n, f"{len(done)} of {n} runs completed"
    elapsed = max(e.occurred_at for e in done) / 1000 - started
    cpu = cpu_seconds(pids) - cpu_before
    emit(
        metric="T",
        unit="steps/s",
        value=round(n * STEPS / elapsed),
        runs=n,
        seconds=round(elapsed, 2),
        worker_processes=processes,
        worker_cpu_us_per_step=round(cpu / (n * STEPS) * 1e6, 1),
        submit_seconds=round(submitted, 3),
        target=">= 2500",
    )


def _log_time(text: str, marker: str) -> float:
    """Wall time of the first log line containing ``marker`` (format: '%Y-%m-%d %H:%M:%S,mmm ...')."""
    line = next(line for line in text.splitlines() if marker in line)
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def bench_recovery(settings: Settings, workdir: Path, respawn: bool = False) -> None:
    """R: a cold restart (the killed worker's process manager starts a new process), or with
    ``respawn``, ``agentlog worker --respawn`` forking a new worker from its loaded modules."""
    serde = Serde(settings)
    client = Client(settings)
    world = workdir / f"world-{int(respawn)}.db"
    env = {"REFUND_WORLD_DB": str(world), "REFUND_HANG_AT_STEP": "31"}
    first_log = workdir / f"r-{int(respawn)}.log"
    victim = start_worker(settings, "r1", first_log, *(["--respawn"] if respawn else []), **env)
    time.sleep(3)
    run_id = client.submit("refund", {"order": "48211"}).run_id
    client.flush()
    deadline = time.monotonic() + 120
    while True:
        try:
            with sqlite3.connect(world) as db:
                if db.execute("SELECT COUNT(*) FROM model_calls WHERE step=31").fetchone()[0]:
                    break
        except sqlite3.OperationalError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("step 31 never started")
        time.sleep(0.02)
    if respawn:  # kill the worker itself (the forked child), as the OOM killer would
        child = json.loads(_log_lines(first_log.read_text(), '"worker_started"')[-1].split(" INFO ", 1)[1])[
            "pid"
        ]
        os.kill(child, signal.SIGKILL)
        restarted = time.time()
        successor, log_path = victim, first_log
    else:
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        restarted = time.time()
        log_path = workdir / "r1b.log"
        successor = start_worker(settings, "r1", log_path, **env)
    result = client.run(run_id).result(timeout=120)
    events = run_events(settings, serde, {run_id})[run_id]
    completed_at = next(e for _, e in events if isinstance(e, RunCompleted)).occurred_at / 1000
    text = log_path.read_text()
    started_line = _log_lines(text, '"worker_started"')[-1]  # the successor's
    log = text[text.index(started_line) :]
    taken = [json.loads(line.split(" INFO ", 1)[1]) for line in _log_lines(log, '"partition_taken"')]
    with sqlite3.connect(world) as db:
        calls = dict(db.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())
        effects = db.execute("SELECT COUNT(*) FROM effects").fetchone()[0]
        attempts = db.execute("SELECT COUNT(*) FROM effect_attempts").fetchone()[0]
    status = client.run(run_id).status()
    started_at = _log_time(log, '"worker_started"')
    run_taken_at = max(_log_time(line, "partition_taken") for line in log.splitlines() if run_id in line)
    emit(
        metric="R",
        restart="respawned by `agentlog worker --respawn`" if respawn else "new process (cold start)",
        unit="s",
        value=round(completed_at - restarted, 3),
        target="<= 0.2" if respawn else "<= 0.45",
        breakdown_s={
            "process_start_and_imports" if not respawn else "fork_and_start": round(
                started_at - restarted, 3
            ),
            "join_claim_rebuild": round(run_taken_at - started_at, 3),
            "finish_steps_31_to_40": round(completed_at - run_taken_at, 3),
        },
        # the partitions' records, read together, then each partition's replay (the longest)
        rebuild_read_ms=max(t.get("read_ms", 0) for t in taken),
        rebuild_ms=max(t["ms"] for t in taken),
        partitions_taken=len(taken),
        reexecuted_model_calls_steps_1_30=sum(calls[s] - 1 for s in range(1, 31)),
        model_calls_step_31=calls[31],
        effects=effects,
        effect_attempts=attempts,
        in_doubt=status.as_dict()["in_doubt"],
        first_attempt_nonces_kept=len(result["nonces"]) == STEPS,
    )
    successor.send_signal(signal.SIGTERM)
    successor.wait(timeout=30)
    client.close()


def _log_lines(text: str, marker: str) -> list[str]:
    return [line for line in text.splitlines() if marker in line]


class _Scraper:
    """GET /metrics of a worker every second in a thread, as a Prometheus server would."""

    def __init__(self, port: int) -> None:
        import threading

        import httpx

        self.port, self.ok = port, 0
        self._stop = threading.Event()

        def scrape() -> None:
            while not self._stop.wait(1.0):
                with contextlib.suppress(httpx.HTTPError):  # not listening yet: the worker is starting
                    self.ok += httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200

        self._thread = threading.Thread(target=scrape, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.ok


def main() -> None:
    # e.g. `refund40.py T` runs only the throughput part; `--e2e` adds the end-to-end figures
    # (bench/e2e.py) to what runs -- to everything if nothing else is named; `E2E` alone, only them.
    args = set(sys.argv[1:])
    e2e = bool({"--e2e", "E2E"} & args)
    only = args - {"--e2e"}
    settings = fresh_deployment(partitions=12)
    serde = Serde(settings)
    if not only or "floor" in only:
        floor_topic = floor_topic_for(settings)
        emit(**transactional_latency(settings, floor_topic))
        emit(**transactional_throughput(settings, floor_topic))
        emit(**idempotent_latency(settings, floor_topic))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        # L, B and T with one worker process; T again with one process per core (a worker is one
        # Python process, its loop on one core: a deployment runs one per core).
        processes = int(os.environ.get("BENCH_WORKER_PROCESSES", str(os.cpu_count() or 1)))
        # BENCH_METRICS_PORT=N: the first worker serves its metrics port and this process scrapes it
        # every second while the benchmark runs (the cost of being watched, see docs/operating-metrics.md).
        metrics_port = os.environ.get("BENCH_METRICS_PORT")
        # BENCH_CHAIN_KEY=K: the workers seal the runs' hash chain with K (runtime.log.records.chain).
        chain = {"AGENTLOG_CHAIN_KEY": key} if (key := os.environ.get("BENCH_CHAIN_KEY")) else {}
        # BENCH_SIGNING_KEY=K: the workers sign the runs' status-bearing records with the Ed25519 key K
        # (base64 of 32 bytes; runtime.log.records.signing).
        if signing := os.environ.get("BENCH_SIGNING_KEY"):
            chain["AGENTLOG_SIGNING_KEY"] = signing
        workers = [
            start_worker(
                settings,
                "bench-0",
                workdir / "worker-0.log",
                *(("--metrics-port", metrics_port) if metrics_port else ()),
                **chain,
            )
        ]
        scraper = _Scraper(int(metrics_port)) if metrics_port else None
        time.sleep(5)
        client = Client(settings)
        try:
            if not only or {"L", "B"} & only:
                bench_latency_and_bytes(settings, serde, client)
            if not only or "T" in only:
                warm_up(settings, client)
                bench_throughput(settings, serde, client, 1, [workers[0].pid])
                if processes > 1:
                    workers += [
                        start_worker(settings, f"bench-{i}", workdir / f"worker-{i}.log", **chain)
                        for i in range(1, processes)
                    ]
                    time.sleep(3 + 2 * processes)  # the group rebalances the partitions
                    warm_up(settings, client)
                    bench_throughput(settings, serde, client, processes, [w.pid for w in workers])
        finally:
            if scraper is not None:
                emit(metric="scrapes", port=scraper.port, ok=scraper.stop())
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
        client.close()
        if e2e:
            bench_e2e(fresh_deployment(partitions=12), workdir)
        if not only or "R" in only:
            bench_recovery(fresh_deployment(partitions=12), workdir)
            bench_recovery(fresh_deployment(partitions=12), workdir, respawn=True)


if __name__ == "__main__":
    main()
