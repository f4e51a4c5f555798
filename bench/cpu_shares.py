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
from bench.peers.cpu import cpu_seconds, machine_busy_seconds, thread_seconds
from bench.peers.workload import STEPS
from infra.topics import drop_topics
from runtime.client import Client, new_run_id


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
            settle = [
                client.submit(workflow, {"run": (r := new_run_id())}, run_id=r).run_id for _ in range(24)
            ]
            client.results(settle, timeout=600)
            time.sleep(1)
            threads, machine = thread_seconds(worker.pid), machine_busy_seconds()
            work, kafka, own = cpu_seconds(worker.pid), cpu_seconds(broker), _own_cpu()
            started = time.time()
            runs = [
                client.submit(workflow, {"run": (r := new_run_id())}, run_id=r).run_id
                for _ in range(args.runs)
            ]
            client.results(runs, timeout=1200)
            elapsed = time.time() - started
            steps = args.runs * STEPS
            shares = {
                "worker": cpu_seconds(worker.pid) - work,
                "broker": cpu_seconds(broker) - kafka,
                "client": _own_cpu() - own,
            }
            busiest = sorted(
                (
                    (cpu - threads.get(tid, (name, 0.0))[1], name)
                    for tid, (name, cpu) in thread_seconds(worker.pid).items()
                ),
                reverse=True,
            )[:4]
            print(
                f"{args.workload}: T {steps / elapsed:.0f} steps/s; machine {(machine_busy_seconds() - machine) / elapsed:.2f} "
                "cores; "
                + "; ".join(
                    f"{who} {cpu / elapsed:.2f} cores, {cpu * 1000 / steps:.3f} ms a step"
                    for who, cpu in shares.items()
                )
                + "; worker's busiest threads: "
                + ", ".join(f"{name} {cpu / elapsed:.2f}" for cpu, name in busiest)
            )
    finally:
        client.close()
        _stop(worker)
        drop_topics(settings)


if __name__ == "__main__":
    main()
