"""What-if throughput (agentlog whatif): forks of the refund-40 agent per second, one worker, fake model.

Records ``--runs`` runs of examples/refund_agent.py (40 steps, the scripted planner, the world in
memory), then replays them all under a changed planner prompt, twice:

- ``from the first call``: forked where the change first touches a run (the planner's first call,
  position 1: nothing copied, 40 live steps a fork), as ``agentlog whatif --prompt`` does;
- ``from step 31``: the same forks cut at position 61 (30 steps of history copied into each fork's
  submission and replayed by the worker, 10 live steps): what copying a prefix costs.

Printed (JSON lines): forks/s and live steps/s of each, the wall of the what-if from its first
submission to its last fork's end; the fork's start per run: the client's part (reading the original's
history, cutting and encoding the seed: ms per fork, median) and the seed's bytes. Timings on a shared
machine are noisy: compare runs of the same machine.

Run: `python bench/whatif.py [--runs 1000] [--window 64]` (services up). A 100-run smoke:
`python bench/whatif.py --runs 100`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker

from runtime.client import Client
from runtime.client.resets import seeded_submission
from runtime.whatif import session
from runtime.whatif.change import parse_change
from runtime.whatif.forks import PlannedRun, run_forks
from runtime.whatif.selection import Selection

STEPS = 40
CUT = 61  # the planner's call of step 31 (two positions a step)


def _emit(**fields: object) -> None:
    print(json.dumps({"bench": "whatif", **fields}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--window", type=int, default=64, help="forks at once (agentlog whatif --window)")
    args = parser.parse_args()
    settings = fresh_deployment(partitions=4, prefix="whatif")
    with tempfile.TemporaryDirectory() as tmp:
        worker = start_worker(settings, "w1", Path(tmp) / "worker.log")
        try:
            with Client(settings) as client:
                started = time.perf_counter()
                runs = [
                    client.submit("refund", {"order": f"o{i}", "steps": STEPS}).run_id
                    for i in range(args.runs)
                ]
                client.results(runs, timeout=3600)
                _emit(metric="recorded", runs=args.runs, seconds=round(time.perf_counter() - started, 2))
                change = parse_change(["planner=You are a stricter refund planner."], [], None)
                prepared = session.prepare(client, Selection(workflow="refund"), change)
                started = time.perf_counter()
                run_forks(
                    client,
                    prepared.whatif_id,
                    change,
                    prepared.planned,
                    window=args.window,
                    timeout=3600,
                    histories=prepared.histories,
                )
                wall = time.perf_counter() - started
                forks = len(prepared.planned)
                _emit(
                    metric="from the first call",
                    forks=forks,
                    live_steps_per_fork=STEPS,
                    seconds=round(wall, 2),
                    forks_per_s=round(forks / wall, 1),
                    steps_per_s=round(forks * STEPS / wall, 1),
                )
                started = time.perf_counter()
                report = session.report(client, prepared.whatif_id)
                _emit(
                    metric="report",
                    runs=len(report.rows),
                    changed=len(report.changed),
                    seconds=round(time.perf_counter() - started, 2),
                )
                # The same forks cut at step 31: 30 steps copied, 10 live.
                late = [PlannedRun(p.index, p.origin, CUT) for p in prepared.planned]
                whatif_id = prepared.whatif_id + "c"
                started = time.perf_counter()
                run_forks(
                    client,
                    whatif_id,
                    change,
                    late,
                    window=args.window,
                    timeout=3600,
                    histories=prepared.histories,
                )
                wall = time.perf_counter() - started
                live = STEPS - (CUT - 1) // 2
                _emit(
                    metric="from step 31",
                    forks=len(late),
                    live_steps_per_fork=live,
                    seconds=round(wall, 2),
                    forks_per_s=round(len(late) / wall, 1),
                    steps_per_s=round(len(late) * live / wall, 1),
                )
                # The client's part of a fork's start: the seed cut and encoded from the history a
                # what-if has read (as run_forks does), and with the history read again per fork
                # (as `agentlog fork` does); no send.
                sample = runs[: min(100, len(runs))]
                for label, reuse in (("history in memory", True), ("history read per fork", False)):
                    costs, sizes = [], []
                    for run_id in sample:
                        begun = time.perf_counter()
                        submission, _ = seeded_submission(
                            client.run(run_id)._reader,  # the seam RunHandle.fork uses
                            run_id,
                            CUT,
                            "bench-seed",
                            allow_in_doubt=False,
                            fork_overrides={},
                            history=prepared.histories[run_id] if reuse else None,
                        )
                        costs.append(time.perf_counter() - begun)
                        sizes.append(len(submission.seed or ""))
                    _emit(
                        metric=f"fork start, client, {label}",
                        cut_position=CUT,
                        forks=len(sample),
                        ms_per_fork_median=round(statistics.median(costs) * 1000, 2),
                        seed_bytes_median=int(statistics.median(sizes)),
                    )
        finally:
            worker.terminate()
            worker.wait(timeout=30)


if __name__ == "__main__":
    main()
