"""What waiting runs cost a worker (issue 37): N runs of a procurement agent waiting for an
approval on one worker, its memory, threads and descriptors; a fresh worker after ``kill -9``;
then every run approved, completed, and each effect applied once.

One worker process (``agentlog worker``, started as bench/_deploy.py starts them), a fresh
deployment of 12 partitions, the agent of bench/waiting_app.py (``--variant native``: the
workflow API) or bench/waiting_pydantic.py (``--variant pydantic``: a PydanticAI ``Agent`` with
``AgentlogDurability``, ``run_agent(..., deferred_signal=...)``). Its model is in-process (an
async function / PydanticAI's ``FunctionModel``): no model server, no network. Steps, each timed:

1. the worker starts; once ready (``/readyz`` 200 and 12 ``partition_taken`` lines in its log)
   its idle RSS and CPU are the baseline;
2. N runs submitted (``Client.submit``, flushed every ``--batch``);
3. until all N wait: the worker's ``/metrics`` count N completed model calls and no active run
   (``agentlog_runs{state="waiting"}`` is printed too: a worker that evicts waiting runs from
   memory may not count them there); then the worker's RSS (/proc/PID/status VmRSS), threads
   (/proc/PID/task), descriptors (/proc/PID/fd) and CPU (utime + stime of /proc/PID/stat);
4. after ``--settle`` seconds (5: two checkpoints of the worker) the worker is killed (SIGKILL) and a fresh one started with the same worker id; one run (the
   probe) is approved at once; ready is timed from the spawn as in 1, and the fresh worker's
   ``partition_taken`` figures are summed; the probe's completion is timed from the spawn to its
   RunCompleted record's time;
5. the other runs approved (signals sent in batches, one flush each ``--batch``), timed until the
   worker's ``agentlog_runs_ended{status="completed"}`` reaches N;
6. the effect rows (one per attempt, bench/waiting_app.py) counted: 2 N rows, 2 N distinct
   (run, effect) pairs and 2 N distinct idempotency keys, or the effects are not ok.

CPU per run: to the wait = (worker CPU at 3 - its idle CPU at 1) / N; replay = (the fresh
worker's CPU at ready - the first worker's idle CPU at ready) / N (the start of a process
subtracted); completing = (the fresh worker's CPU once all completed - at ready) / N. KB/run =
(RSS at 3 - idle RSS) / N. The driver's own RSS (this process: client, run ids) is printed apart.

``--cache-size`` is passed as AGENTLOG_RUN_CACHE_SIZE when this code's Settings has
``run_cache_size`` (the bounded run cache, issue 37), and is ignored with a note otherwise.
``--nofile`` sets the worker's descriptor limit (RLIMIT_NOFILE, soft and hard) right after its
spawn; by default it inherits this process's.

Run: ``python bench/waiting.py --variant native --runs 10000 [--cache-size 1000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker
from prometheus_client.parser import text_string_to_metric_families

from bench.peers.cpu import cpu_seconds
from infra.topics import drop_topics
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import RunCompleted, SignalSent
from runtime.workflow.canonical import canonical_json

PARTITIONS = 12
WORKER_ID = "waiting-0"
VARIANTS: dict[str, tuple[str, Any]] = {
    # app, the approval signal's payload
    "native": ("bench.waiting_app:app", {"approved": True}),
    "pydantic": ("bench.waiting_pydantic:app", {"approvals": {"reserve": True, "place": True}}),
}
SIGNAL = "approval"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def say(message: str) -> None:
    print(f"[waiting {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rss_mb(pid: int | str, field: str = "VmRSS") -> float:
    """``field`` of /proc/PID/status in MB: VmRSS now, or VmHWM, the peak RSS of the process's life."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no {field} in /proc/{pid}/status")


def driver_memory() -> str:
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return f"VmRSS {fields['VmRSS'].strip()}, peak VmHWM {fields['VmHWM'].strip()}"


@dataclass
class Sample:
    """A worker process's resources at one instant (Linux /proc)."""

    rss_mb: float
    threads: int
    fds: int
    cpu_s: float
    peak_mb: float  # VmHWM: the highest RSS of the process so far

    @classmethod
    def of(cls, pid: int) -> Sample:
        return cls(
            rss_mb=rss_mb(pid),
            threads=len(os.listdir(f"/proc/{pid}/task")),
            fds=len(os.listdir(f"/proc/{pid}/fd")),
            cpu_s=cpu_seconds(pid),
            peak_mb=rss_mb(pid, "VmHWM"),
        )


@dataclass
class Worker:
    """One ``agentlog worker`` process of the benchmark, with its ops port and its own log file."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    spawned: float  # time.time() just before the spawn
    spawned_mono: float

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str, timeout: float = 10) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            return 0, str(error)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, body = self.get("/metrics", timeout=30)
        if status != 200:
            self.check_alive()
            now = Sample.of(self.pid)
            raise SystemExit(
                f"worker {self.pid}: /metrics answered {status}: {body[:200]} -- it holds {now.threads} threads, "
                f"{now.fds} fds (RLIMIT_NOFILE {self.limits_nofile()}), RSS {now.rss_mb:.0f} MB; its log ends:\n"
                + self.tail()
            )
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }

    def taken(self) -> list[dict[str, Any]]:
        """The figures of this process's ``partition_taken`` log lines."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if '"partition_taken"' in line:
                found.append(json.loads(line[line.index("{") :]))
        return found

    def partitions_taken(self) -> int:
        return len({t["partition"] for t in self.taken()})

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise SystemExit(
                f"worker {self.pid} exited ({self.proc.returncode}); its log ends:\n{self.tail()}"
            )

    def tail(self, lines: int = 15) -> str:
        return "\n".join(line[:400] for line in self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float) -> float:
        """Seconds from the spawn until /readyz answers 200 and every partition has been taken."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            if self.get("/readyz", timeout=2)[0] == 200 and self.partitions_taken() >= PARTITIONS:
                return time.monotonic() - self.spawned_mono
            if time.monotonic() > deadline:
                status, body = self.get("/readyz", timeout=2)
                raise SystemExit(
                    f"worker {self.pid} not ready after {timeout:.0f} s: /readyz {status} {body.strip()!r}, "
                    f"{self.partitions_taken()} of {PARTITIONS} partitions taken (log: {self.log})"
                )
            time.sleep(0.02)

    def limits_nofile(self) -> str:
        for line in Path(f"/proc/{self.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return " / ".join(line.split()[3:5])
        return "?"


def cached(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], where: str) -> int | str:
    """``agentlog_runs_cached{where=...}``, or "-" where the worker has no run cache."""
    key = ("agentlog_runs_cached", (("where", where),))
    return int(metrics[key]) if key in metrics else "-"


def total(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, sample_labels), value in metrics.items()
        if sample == name and all((k, v) in sample_labels for k, v in labels.items())
    )


@dataclass
class Bench:
    settings: Settings
    workdir: Path
    variant: str
    runs: int
    batch: int
    nofile: int | None
    env: dict[str, str]
    settle: float = 5.0
    wave: int = 0
    figures: dict[str, Any] = field(default_factory=dict)

    def start(self, log_name: str) -> Worker:
        port = free_port()
        spawned, mono = time.time(), time.monotonic()
        proc = start_worker(
            self.settings,
            WORKER_ID,
            self.workdir / log_name,
            "--metrics-port",
            str(port),
            app=VARIANTS[self.variant][0],
            **self.env,
        )
        if self.nofile is not None:
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        return Worker(proc, port, self.workdir / log_name, spawned, mono)

    def poll_until(
        self,
        worker: Worker,
        done: Callable[[dict[Any, float]], bool],
        timeout: float,
        every: float,
        what: str,
    ) -> dict[Any, float]:
        deadline = time.monotonic() + timeout
        while True:
            worker.check_alive()
            metrics = worker.metrics()
            failed = total(metrics, "agentlog_runs_ended_total") - total(
                metrics, "agentlog_runs_ended_total", status="completed"
            )
            if failed:
                raise SystemExit(f"{failed:.0f} runs ended otherwise than completed (see {worker.log})")
            if done(metrics):
                return metrics
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout:.0f} s waiting until {what}")
            time.sleep(every)

    def signal(self, client: Client, run_ids: list[str]) -> None:
        """Approve ``run_ids``: one SignalSent each, flushed every ``batch``. ``RunHandle.signal``
        waits for the broker's ack of each signal (~ms each: minutes for 100,000) and the client
        has no call that signals many runs, so the commands go through its writer, as
        ``RunHandle.signal`` sends them, and are flushed once a batch."""
        payload = canonical_json(VARIANTS[self.variant][1])
        writer = client._writer  # private: see the docstring
        for i, run_id in enumerate(run_ids, 1):
            writer.send(SignalSent(run_id=run_id, name=SIGNAL, payload=payload))
            if i % self.batch == 0:
                client.flush()
        client.flush()

    def run(self) -> dict[str, Any]:
        n, f = self.runs, self.figures
        timeout = 120 + n * (0.05 if self.variant == "native" else 0.2)
        # A scrape of /metrics counts every run the worker holds (~1 us each): the polls of the
        # waits below cost the worker ~1 % of its CPU at any N.
        every = max(0.1, n / 100_000)
        started = time.monotonic()
        first = self.start("worker-1.log")
        second: Worker | None = None
        client = Client(self.settings)
        try:
            ready = first.wait_ready(120)
            time.sleep(1)  # its first scrape and the group's settling off the idle figure
            idle = Sample.of(first.pid)
            say(
                f"worker {first.pid} ready in {ready:.2f} s: idle RSS {idle.rss_mb:.1f} MB, {idle.threads} "
                f"threads, {idle.fds} fds, CPU {idle.cpu_s:.2f} s; RLIMIT_NOFILE {first.limits_nofile()}"
            )

            # 2. submit N (in waves of --wave, each waited for: runs arriving over time, not all at
            # once -- a burst has every run in flight at once before any waits, and CPython's
            # allocator keeps that peak's memory)
            t0 = time.monotonic()
            tag = secrets.token_hex(3)
            run_ids: list[str] = []
            wave = self.wave or n
            submit_s = 0.0
            metrics: dict[Any, float] = {}
            while len(run_ids) < n:
                started = time.monotonic()
                for i in range(len(run_ids), min(n, len(run_ids) + wave)):
                    run_id = f"{tag}{i:07d}"
                    client.submit("procure", {"order": run_id}, run_id=run_id)
                    run_ids.append(run_id)
                    if (i + 1) % self.batch == 0:
                        client.flush()
                client.flush()
                submit_s += time.monotonic() - started
                so_far = len(run_ids)
                # 3. until all submitted so far wait

                def all_wait(m: dict[Any, float], so_far: int = so_far) -> bool:
                    return (
                        total(m, "agentlog_calls_total", kind="model", outcome="completed") >= so_far
                        and total(m, "agentlog_runs", state="active") == 0
                    )

                metrics = self.poll_until(first, all_wait, timeout, every, f"{so_far} runs wait")
            f["submit_s"] = submit_s
            f["wave"] = wave
            say(f"submitted {n} runs in waves of {wave}, {submit_s:.2f} s of submits")
            f["to_wait_s"] = time.monotonic() - t0
            waiting = Sample.of(first.pid)
            f["waiting_gauge"] = total(metrics, "agentlog_runs", state="waiting")
            # the bounded run cache's gauge (issue 37), where the code has it: runs in memory / evicted
            f["in_memory"] = cached(metrics, "memory")
            f["evicted"] = cached(metrics, "evicted")
            f["rss_mb"] = waiting.rss_mb
            f["peak_to_wait_mb"] = waiting.peak_mb
            f["kb_per_run"] = (waiting.rss_mb - idle.rss_mb) * 1024 / n
            f["threads"], f["fds"] = waiting.threads, waiting.fds
            f["cpu_wait_ms"] = (waiting.cpu_s - idle.cpu_s) * 1000 / n
            say(
                f"all {n} waiting {f['to_wait_s']:.2f} s after the first submit (agentlog_runs waiting: "
                f"{f['waiting_gauge']:.0f}; in memory / evicted: {f['in_memory']} / {f['evicted']}): RSS {waiting.rss_mb:.1f} MB ({f['kb_per_run']:.1f} KB/run over idle), "
                f"{waiting.threads} threads, {waiting.fds} fds, CPU {f['cpu_wait_ms']:.3f} ms/run; peak RSS {waiting.peak_mb:.1f} MB"
            )

            # 4. kill -9, a fresh worker; the probe approved at once. The runs have waited a few
            # checkpoint intervals first (--settle), as runs waiting for an approval have: a takeover
            # indexes the runs its checkpoint lists as waiting, and replays the ones that began
            # waiting after it (a kill the instant the last run began waiting measures those).
            time.sleep(self.settle)
            first.proc.kill()
            first.proc.wait()
            second = self.start("worker-2.log")
            probe = run_ids[-1]
            self.signal(client, [probe])
            f["ready_s"] = second.wait_ready(timeout)
            at_ready = Sample.of(second.pid)
            f["cpu_replay_ms"] = (at_ready.cpu_s - idle.cpu_s) * 1000 / n
            f["ready_cpu_s"] = at_ready.cpu_s
            taken = second.taken()
            f["taken"] = {
                "partitions": len(taken),
                "active_runs": sum(t.get("active_runs", 0) for t in taken),
                "from_snapshots": sum(t.get("from_snapshots", 0) for t in taken),
                "records_read": sum(t.get("records_read", 0) for t in taken),
                "max_ms": max((t.get("ms", 0) for t in taken), default=0),
                "sum_ms": round(sum(t.get("ms", 0) for t in taken), 1),
                "max_read_ms": max((t.get("read_ms", 0) for t in taken), default=0),
                "in_doubt": sum(len(t.get("in_doubt", [])) for t in taken),
            }
            say(
                f"fresh worker {second.pid} ready {f['ready_s']:.2f} s after its spawn: RSS {at_ready.rss_mb:.1f} MB, "
                f"{at_ready.threads} threads, {at_ready.fds} fds, CPU {at_ready.cpu_s:.2f} s "
                f"({f['cpu_replay_ms']:.3f} ms/run over a bare start); partition_taken: {f['taken']}"
            )

            # 5. approve the rest, until all complete
            t1 = time.monotonic()
            self.signal(client, run_ids[:-1])
            f["signal_s"] = time.monotonic() - t1
            say(f"sent {n - 1} more signals in {f['signal_s']:.2f} s")
            self.poll_until(
                second,
                lambda m: total(m, "agentlog_runs_ended_total", status="completed") >= n,
                timeout,
                every,
                f"{n} runs complete",
            )
            f["complete_s"] = time.monotonic() - t1
            done = Sample.of(second.pid)
            f["cpu_complete_ms"] = (done.cpu_s - at_ready.cpu_s) * 1000 / n
            f["rss_done_mb"] = done.rss_mb
            # the fresh worker's peak: its takeover and the approval burst (the burst is the larger)
            f["peak_done_mb"] = done.peak_mb
            say(
                f"all {n} completed {f['complete_s']:.2f} s after the first of the other signals: CPU "
                f"{f['cpu_complete_ms']:.3f} ms/run; RSS {done.rss_mb:.1f} MB (peak {done.peak_mb:.1f} MB), "
                f"{done.threads} threads, {done.fds} fds"
            )
        finally:
            client.close()
            for worker in (first, second):
                if worker is not None and worker.proc.poll() is None:
                    worker.proc.terminate()
                    try:
                        worker.proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        worker.proc.kill()
                        worker.proc.wait()

        # the probe's completion, from its RunCompleted record (the worker's clock, this machine's)
        with Client(self.settings) as reader:
            ends = [e.event for e in reader.run(probe).events() if isinstance(e.event, RunCompleted)]
        f["first_s"] = ends[0].occurred_at / 1000 - second.spawned if ends else None
        f.update(count_effects(self.workdir / "effects.db", n))
        f["wall_s"] = time.monotonic() - started
        return f


def count_effects(db: Path, n: int) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        rows, pairs, keys, runs, keyless = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT run || '/' || effect), COUNT(DISTINCT idempotency_key), "
            "COUNT(DISTINCT run), SUM(idempotency_key IS NULL OR idempotency_key = '') FROM effect_attempts"
        ).fetchone()
    ok = rows == pairs == keys == 2 * n and runs == n and not keyless
    return {
        "effect_rows": rows,
        "effect_pairs": pairs,
        "effect_keys": keys,
        "effect_runs": runs,
        "effects_ok": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", choices=tuple(VARIANTS), default="native")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cache-size", type=int, default=None, help="AGENTLOG_RUN_CACHE_SIZE of the workers")
    parser.add_argument(
        "--nofile", type=int, default=None, help="the workers' RLIMIT_NOFILE (default: inherited)"
    )
    parser.add_argument(
        "--busy-max", type=int, default=None, help="AGENTLOG_RUN_CACHE_BUSY_MAX of the workers (admission)"
    )
    parser.add_argument("--batch", type=int, default=5000, help="submits and signals per flush")
    parser.add_argument(
        "--wave",
        type=int,
        default=0,
        help="submit in waves of this many runs, each waited for before the next (0: all at once)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds the runs wait before the kill (the worker checkpoints every 2 s); 0: kill at once",
    )
    parser.add_argument("--keep", action="store_true", help="keep the workers' logs and the effects file")
    args = parser.parse_args()
    if args.runs < 1 or args.batch < 1:
        parser.error("--runs and --batch must be at least 1")
    env: dict[str, str] = {}
    cache = "default"
    if args.cache_size is not None:
        if "run_cache_size" in Settings.model_fields:
            env["AGENTLOG_RUN_CACHE_SIZE"] = str(args.cache_size)
            cache = str(args.cache_size)
        else:
            say(f"--cache-size {args.cache_size} ignored: this code's Settings has no run_cache_size")
            cache = "n/a"
    if args.busy_max is not None:
        if "run_cache_busy_max" in Settings.model_fields:
            env["AGENTLOG_RUN_CACHE_BUSY_MAX"] = str(args.busy_max)
            cache += f" (busy {args.busy_max})"
        else:
            say(f"--busy-max {args.busy_max} ignored: this code's Settings has no run_cache_busy_max")
    workdir = Path(tempfile.mkdtemp(prefix="waiting-bench-"))
    env["WAITING_DB"] = str(workdir / "effects.db")
    settings = fresh_deployment(partitions=PARTITIONS, prefix="waiting")
    say(
        f"{args.variant}, {args.runs} runs, run cache {cache}; deployment {settings.commands_topic}; logs in {workdir}"
    )
    bench = Bench(
        settings, workdir, args.variant, args.runs, args.batch, args.nofile, env, args.settle, args.wave
    )
    try:
        f = bench.run()
    except BaseException:
        say(f"failed: the workers' logs and the effects are kept in {workdir}")
        raise
    finally:
        drop_topics(settings)
    if args.keep:
        say(f"the workers' logs and the effects are kept in {workdir}")
    else:
        shutil.rmtree(workdir)
    say(f"driver (this process): {driver_memory()}")
    print(json.dumps({"variant": args.variant, "runs": args.runs, "cache": cache, **f}, default=str))
    first = "-" if f["first_s"] is None else f"{f['first_s']:.2f}"
    print()
    print(
        "| N | variant | wave | cache | RSS MB | KB/run | threads | fds | CPU ms/run: to wait / replay / completing "
        "| ready s | first done s | complete s | effects ok |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| {args.runs:,} | {args.variant} | {f['wave']:,} | {cache} | {f['rss_mb']:.0f} | {f['kb_per_run']:.1f} | {f['threads']} "
        f"| {f['fds']} | {f['cpu_wait_ms']:.2f} / {f['cpu_replay_ms']:.2f} / {f['cpu_complete_ms']:.2f} "
        f"| {f['ready_s']:.2f} | {first} | {f['complete_s']:.2f} "
        f"| {'yes' if f['effects_ok'] else 'NO'} ({f['effect_rows']} rows) |"
    )
    if not f["effects_ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
