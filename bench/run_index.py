"""Reading a finished run that another client submitted: ``Client.result`` and ``Client.status``
with ``--events`` records of other runs before it in its partition (issue 11, item 1).

One deployment of one partition gets ``--events`` records of ended runs, then one more run that
ends; once the worker's checkpoint has located it in the run index the worker stops. Then, each
time in a fresh process (the code on PYTHONPATH first), the cases alternating round by round:
  new  this code: the run index locates the run (result reads its ending event, status its records)
  old  the code of another checkout (``--old``, e.g. main): the partition is scanned
each process timing a fresh Client's ``result`` and then ``status`` of the run, ``--repeats`` times
(the Client's reader already connected to both topics and its schemas resolved: the clock times
the reads, not the connecting).
Prints the medians and the events records each read went through.

    python bench/run_index.py [--events 20000] [--rounds 3] --old /tmp/runindex-old
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

STEPS = 48  # tool steps per run of the traffic: 2 * STEPS + 2 events
CHUNK = 50  # runs submitted at once


def measure(run_id: str, repeats: int) -> None:
    """In a fresh process: time ``result`` then ``status`` of ``run_id``, each on a fresh Client."""
    import runtime
    from runtime.client import Client
    from runtime.config import load_settings
    from runtime.log.schemas.serde import Serde

    settings = load_settings()
    serde = Serde(settings)
    serde.warm_up()  # schema ids resolved before the clock: the clock times the reads
    timings: dict[str, list[float]] = {"result": [], "status": []}
    read: dict[str, int | None] = {}
    for _ in range(repeats):
        for call in ("result", "status"):
            with Client(settings, serde=serde) as client:
                for topic in (
                    settings.events_topic,
                    settings.checkpoints_topic,
                ):  # connected before the clock
                    list(client.log.read(topic, 0, start=0, end=1))
                started = time.perf_counter()
                answer = (
                    client.run(run_id).result(timeout=60)
                    if call == "result"
                    else client.run(run_id).status().status
                )
                timings[call].append(time.perf_counter() - started)
                read[call] = getattr(client, "events_records_read", None)
                assert answer in (3, "completed"), answer
    print(json.dumps({"timings": timings, "read": read, "code": str(Path(runtime.__file__).parent.parent)}))


def produce(events: int, workdir: Path) -> tuple[Any, str, int]:
    """The deployment, the run read, and its partition's end."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _deploy import fresh_deployment, start_worker

    from runtime.client import Client

    settings = fresh_deployment(1, "runindex")
    worker = start_worker(settings, "run-index-bench", workdir / "worker.log", app="bench.rebuild_app:app")
    client = Client(settings)
    try:
        runs = max(1, events // (2 * STEPS + 2))
        for first in range(0, runs, CHUNK):
            batch = [client.submit("burst", {"steps": STEPS}).run_id for _ in range(min(CHUNK, runs - first))]
            client.results(batch, timeout=600)
        run_id = client.submit("burst", {"steps": 3}).run_id
        assert client.run(run_id).result(timeout=60) == 3
        deadline = time.monotonic() + 120
        while (located := client.run(run_id).location()) is None or located.end is None:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit(f"the run was not located in the index; see {workdir}/worker.log")
            time.sleep(0.2)
        end = client.log.watermarks(settings.events_topic, 0)[1]
        return settings, run_id, end
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        client.close()


def run_measure(settings: Any, run_id: str, code: Path, repeats: int) -> dict[str, Any]:
    from infra.deployment import environment

    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", run_id, "--repeats", str(repeats)],
        cwd=code,
        env=environment(settings, str(code)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"measuring with {code} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["code"]).resolve() != code.resolve():
        raise SystemExit(f"the measurement ran {result['code']}, not {code}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--events", type=int, default=20_000, help="records of other runs before the run read"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timings of each call per process")
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare (e.g. main)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure, args.repeats)
        return
    if args.old is None:
        parser.error("--old: a checkout of the code to compare is needed")
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="runindex-bench-") as tmp:
        settings, run_id, end = produce(args.events, Path(tmp))
    print(f"events partition: {end} records; run {run_id} ended last")
    cases = {"new": root, "old": args.old}
    times: dict[str, dict[str, list[float]]] = {case: {"result": [], "status": []} for case in cases}
    for round_ in range(args.rounds):
        for case, code in cases.items():
            result = run_measure(settings, run_id, code, args.repeats)
            for call, seconds in result["timings"].items():
                times[case][call].extend(seconds)
            print(f"  round {round_ + 1} {case}: {json.dumps(result['timings'])} read {result['read']}")
    for call in ("result", "status"):
        medians = {case: statistics.median(times[case][call]) * 1000 for case in cases}
        print(
            f"{call:6} median new {medians['new']:.1f} ms, old {medians['old']:.1f} ms, "
            f"old / new {medians['old'] / medians['new']:.1f}x"
        )
    from confluent_kafka.admin import AdminClient

    topics = [
        settings.commands_topic,
        settings.events_topic,
        settings.checkpoints_topic,
        settings.payloads_topic,
    ]
    AdminClient(settings.kafka_common()).delete_topics(topics)


if __name__ == "__main__":
    main()
