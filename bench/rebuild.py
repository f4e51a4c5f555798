"""Rebuild cost with one run waiting behind the traffic of ended runs (issue 14, item 3).

One deployment of two partitions gets the same traffic of ended runs in each (``burst`` runs of
``--steps`` tool steps); partition 0 also holds a run that started before the traffic and waits
for a signal all along. After the traffic the worker is stopped, and ``runtime.worker.rebuild.
rebuild`` -- what a worker taking a partition runs -- is timed, each time in a fresh process,
the cases alternating round by round:
  waiting  partition 0, this code: the waiting run comes from its history snapshot
  none     partition 1, this code: no run waiting
  old      partition 0, the code of another checkout (``--old``, e.g. main, without snapshots)
Prints the medians, the records each read, and the ratio waiting / none (target <= 2).

    python bench/rebuild.py [--events 200000] [--rounds 3] [--old /tmp/rebuild-old]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEPS = 48  # tool steps per burst run: 2 * STEPS + 2 events
CHUNK = 100  # burst runs submitted at once per partition


def measure(partition: int) -> None:
    """In a fresh process (the code on PYTHONPATH first): time one rebuild of ``partition``."""
    import runtime
    from runtime.config import load_settings
    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.schemas.serde import Serde
    from runtime.worker.rebuild import rebuild

    settings = load_settings()
    serde = Serde(settings)
    serde.warm_up()  # as a worker does at start: every local schema id resolved before the rebuild
    log = KafkaLog(settings)
    try:
        end = log.watermarks(settings.events_topic, partition)[1]
        started = time.perf_counter()
        rebuilt = rebuild(settings, serde, log, partition, end)
        seconds = time.perf_counter() - started
    finally:
        log.close()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "records_read": rebuilt.records_read,
                "records_decoded": rebuilt.records_decoded,
                "active": len(rebuilt.active),
                "from_snapshots": len(getattr(rebuilt, "snapshots", {})),
                "end": end,
                "code": str(Path(runtime.__file__).parent.parent),
            }
        )
    )


def produce(events: int, workdir: Path, processes: int) -> tuple[Any, dict[int, int], str]:
    """The deployment, its events partitions' ends, and the waiting run's id."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _deploy import fresh_deployment, start_worker

    from runtime.client import Client
    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.port.partitioning import name_in_partition
    from runtime.log.schemas.serde import Serde
    from runtime.worker.rebuild import latest_checkpoint

    settings = fresh_deployment(2, "rebuild")
    workers = [
        start_worker(settings, f"rebuild-bench-{i}", workdir / f"worker-{i}.log", app="bench.rebuild_app:app")
        for i in range(processes)
    ]
    client = Client(settings)
    log = KafkaLog(settings)
    serde = Serde(settings)
    try:

        def end(partition: int) -> int:
            return log.watermarks(settings.events_topic, partition)[1]

        def wait_for(condition: Any, what: str, timeout: float = 3600) -> Any:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if any(w.poll() is not None for w in workers):
                    raise SystemExit(f"a worker exited; see the worker logs in {workdir}")
                value = condition()
                if value:
                    return value
                time.sleep(0.2)
            raise SystemExit(f"timed out waiting for {what}")

        wait_for(lambda: end(0) >= 1 and end(1) >= 1, "the workers' claims")
        waiting = name_in_partition("waiting", 0, 2)
        client.submit("wait", {}, run_id=waiting)
        client.flush()
        wait_for(lambda: client.run(waiting).status().status == "running", "the waiting run to start")
        base = {p: end(p) for p in (0, 1)}
        per_run = 2 * STEPS + 2
        runs = max(1, events // per_run)
        started = time.monotonic()
        for first in range(0, runs, CHUNK):
            count = min(CHUNK, runs - first)
            last: list[str] = []
            for partition in (0, 1):
                for i in range(first, first + count):
                    run_id = client.submit("burst", {"steps": STEPS}, run_id=name_in_partition(f"b{partition}-{i}", partition, 2)).run_id
                last.append(run_id)
            client.flush()
            target = (first + count) * per_run
            wait_for(
                lambda t=target: end(0) >= base[0] + t and end(1) >= base[1] + t,
                f"{first + count} runs per partition",
            )
            for run_id in last:
                client.run(run_id).result(timeout=600)
            print(f"  {first + count}/{runs} runs per partition, {time.monotonic() - started:.0f} s", file=sys.stderr)
        ends = {p: end(p) for p in (0, 1)}

        def covered() -> bool:
            reads = [latest_checkpoint(settings, serde, log, p) for p in (0, 1)]
            return all(r.checkpoint is not None and r.checkpoint.covered_offset >= ends[p] for p, r in enumerate(reads))

        wait_for(covered, "checkpoints covering the traffic")
        return settings, ends, waiting
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
        client.close()
        log.close()


def run_measure(settings: Any, partition: int, code: Path) -> dict[str, Any]:
    from infra.deployment import environment

    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", str(partition)],
        cwd=code,
        env=environment(settings, str(code)),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"measuring partition {partition} with {code} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["code"]).resolve() != code.resolve():
        raise SystemExit(f"the measurement ran {result['code']}, not {code}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000, help="events of ended runs per partition")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="worker processes producing the traffic")
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare (e.g. main)")
    parser.add_argument("--keep", action="store_true", help="keep the deployment's topics")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure)
        return
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="rebuild-bench-") as tmp:
        settings, ends, waiting = produce(args.events, Path(tmp), args.workers)
    print(f"events partition 0: {ends[0]} records (run {waiting} waiting since offset 1); partition 1: {ends[1]}")
    cases: dict[str, tuple[int, Path]] = {"waiting": (0, root), "none": (1, root)}
    if args.old is not None:
        cases["old"] = (0, args.old)
    results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for round_ in range(args.rounds):
        for case, (partition, code) in cases.items():
            result = run_measure(settings, partition, code)
            results[case].append(result)
            print(f"  round {round_ + 1} {case}: {result['seconds']:.3f} s, {result['records_read']} records read")
    medians = {case: statistics.median(r["seconds"] for r in rs) for case, rs in results.items()}
    for case, rs in results.items():
        last = rs[-1]
        print(
            f"{case:8} median {medians[case]:.3f} s  (records read {last['records_read']}, decoded "
            f"{last['records_decoded']}, active runs {last['active']}, from snapshots {last['from_snapshots']}; "
            f"code {last['code']})"
        )
    print(f"ratio waiting / none: {medians['waiting'] / medians['none']:.2f} (target <= 2)")
    if "old" in medians:
        print(f"ratio old (waiting) / none: {medians['old'] / medians['none']:.2f}")
    if not args.keep:
        from confluent_kafka.admin import AdminClient

        topics = [settings.commands_topic, settings.events_topic, settings.checkpoints_topic, settings.payloads_topic]
        AdminClient(settings.kafka_common()).delete_topics(topics)


if __name__ == "__main__":
    main()
