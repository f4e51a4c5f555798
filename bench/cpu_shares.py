"""Who uses the machine while agentlog runs make compare's T: N runs of bench/peers/workload.py's
workload submitted at once to one worker, and over that stretch the CPU (in cores) of the worker
process, its busiest threads (the event loop's is "python"), the Kafka broker, this client process
and the whole machine, with each one's ms of CPU a step.

The same worker serves ``--rounds`` stretches in a row (24 runs before each, to settle its batches),
so the figures of one sitting compare; a T figure here is not make compare's (that one takes a fresh
deployment per round). Needs the services up (``agentlog infra up``).

Run: ``python bench/cpu_shares.py [--workload sync|async] [--runs 200] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment

from bench.peers.agentlog_bench import WORKFLOWS, _stop, _warm, _worker
from bench.peers.cpu import cpu_seconds
from bench.peers.workload import STEPS
from infra.topics import drop_topics
from runtime.client import Client, new_run_id

_TICKS = 100.0  # /proc's clock ticks a second (SC_CLK_TCK on Linux)


def _threads(pid: int) -> dict[str, tuple[str, float]]:
    """Thread id -> (name, CPU seconds) of ``pid``'s threads."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[task.name] = (stat[stat.index("(") + 1 : stat.rindex(")")], (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


def _machine_busy() -> float:
    """CPU seconds the machine spent not idle (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICKS


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKFLOWS), default="sync")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    broker = int(subprocess.check_output(["pgrep", "-f", "kafka.Kafka"]).split()[0])
    workdir = Path(tempfile.mkdtemp(prefix="agentlog-cpu-shares-"))
    settings = fresh_deployment(partitions=12, prefix="shares")
    worker = _worker(settings, workdir, workdir / "e2e.db", "0")
    client = Client(settings)
    workflow = WORKFLOWS[args.workload]
    try:
        _warm(client, workflow)
        for _ in range(args.rounds):
            settle = [client.submit(workflow, {"run": (r := new_run_id())}, run_id=r).run_id for _ in range(24)]
            client.results(settle, timeout=600)
            time.sleep(1)
            threads, machine = _threads(worker.pid), _machine_busy()
            work, kafka, own = cpu_seconds(worker.pid), cpu_seconds(broker), _own_cpu()
            started = time.time()
            runs = [client.submit(workflow, {"run": (r := new_run_id())}, run_id=r).run_id for _ in range(args.runs)]
            client.results(runs, timeout=1200)
            elapsed = time.time() - started
            steps = args.runs * STEPS
            shares = {
                "worker": cpu_seconds(worker.pid) - work,
                "broker": cpu_seconds(broker) - kafka,
                "client": _own_cpu() - own,
            }
            busiest = sorted(
                ((cpu - threads.get(tid, (name, 0.0))[1], name) for tid, (name, cpu) in _threads(worker.pid).items()),
                reverse=True,
            )[:4]
            print(
                f"{args.workload}: T {steps / elapsed:.0f} steps/s; machine {(_machine_busy() - machine) / elapsed:.2f} "
                "cores; "
                + "; ".join(f"{who} {cpu / elapsed:.2f} cores, {cpu * 1000 / steps:.3f} ms a step" for who, cpu in shares.items())
                + "; worker's busiest threads: "
                + ", ".join(f"{name} {cpu / elapsed:.2f}" for cpu, name in busiest)
            )
    finally:
        client.close()
        _stop(worker)
        drop_topics(settings)


if __name__ == "__main__":
    main()
