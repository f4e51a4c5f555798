"""Where the time of one step and of submit/result goes: N end-to-end runs of the refund-40
workload (bench/e2e_app.py: 40 steps of a scripted model call and a sync tool committing one
SQLite row; ``--workload sync``: its e2e-sync workflow, a sync model committing a row of its own,
bench/peers/workload.py; ``--workload agent``: the 40-step PydanticAI agent of bench/compare_agents.py)
on the real stack, with stage marks on (runtime.stagemarks) in the worker and here,
printed as medians and p90 per stage (bench/stage_table.py).

Marks are wall-clock ns (CLOCK_REALTIME) of one machine; stages inside one process compare
exactly, the hops between the client and the worker as exactly as that clock. Each run is
submitted to an idle worker (a pause before it), as E2E-L is.

Run: `make bench-stages` (services up) or `python bench/stages.py [--runs N] [--workload sync|agent]`.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker
from kafka_floor import floor_topic_for, idle_round_trip

from bench.stage_table import ACK, RESULT, STEP, SUBMIT, SYNC_STEP, Timeline, steps, table, walk
from runtime import stagemarks
from runtime.client import Client, new_run_id

# workload -> (app, workflow, a step's chain). ``agent``: the 40-step PydanticAI agent of
# bench/compare_agents.py (bench/peers/agent_agentlog_app.py), its model a call committing a row too.
WORKFLOWS = {
    "async": ("bench.e2e_app:app", "e2e", STEP),
    "sync": ("bench.e2e_app:app", "e2e-sync", SYNC_STEP),
    "agent": ("bench.peers.agent_agentlog_app:app", "agent", SYNC_STEP),
}


def _timelines(marks_dir: Path, db: Path, runs: list[str]) -> dict[str, Timeline]:
    """Each run's marks by time: the worker's, this process's (prefixed "client "), and the
    tool's and the sync model's SQLite commits ("tool commit", "model commit")."""
    wanted = set(runs)
    lines: dict[str, Timeline] = defaultdict(list)
    for path in marks_dir.glob("marks-*.tsv"):
        client = path.name == f"marks-{os.getpid()}.tsv"
        for line in path.read_text().splitlines():
            ns, stage, run, _position = line.split("\t")
            if run in wanted:
                lines[run].append((int(ns), f"client {stage}" if client else stage))
    with sqlite3.connect(db, timeout=30) as conn:
        placeholders = ",".join("?" * len(runs))
        for run, at in conn.execute(f"SELECT run, at FROM tool_calls WHERE run IN ({placeholders})", runs):
            lines[run].append((round(at * 1e9), "tool commit"))
        for run, at in conn.execute(f"SELECT run, at FROM model_calls WHERE run IN ({placeholders})", runs):
            lines[run].append((round(at * 1e9), "model commit"))
    for timeline in lines.values():
        timeline.sort()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs measured (after 3 warm-up runs)")
    parser.add_argument("--idle", type=float, default=0.5, help="seconds the worker idles before each run")
    parser.add_argument("--workload", choices=sorted(WORKFLOWS), default="async")
    parser.add_argument(
        "--concurrent",
        type=int,
        default=0,
        help="submit this many runs at once (after one idle) instead of one at a time: where a step's "
        "time goes under load, as in make compare's T",
    )
    args = parser.parse_args()
    app, workflow, step_chain = WORKFLOWS[args.workload]
    workdir = Path(tempfile.mkdtemp(prefix="agentlog-stages-"))
    marks_dir = workdir / "marks"
    marks_dir.mkdir()
    stagemarks.enable(str(marks_dir))
    db = workdir / "e2e.db"
    settings = fresh_deployment(partitions=12)
    worker = start_worker(
        settings, "stages-0", workdir / "worker.log", app=app, E2E_DB=str(db), BENCH_STAGE_MARKS=str(marks_dir)
    )
    client = Client(settings)
    runs: list[str] = []
    try:
        for _ in range(3):  # the worker joins, claims its partitions and warms its code paths
            client.submit(workflow, {"run": (run := new_run_id())}, run_id=run).result(timeout=120)
        if args.concurrent:
            time.sleep(args.idle)
            batch = [new_run_id() for _ in range(args.concurrent)]
            for run in batch:
                stagemarks.mark("submit called", run)
                client.submit(workflow, {"run": run}, run_id=run)
                stagemarks.mark("submit returned", run)
            client.results(batch, timeout=600)
            runs.extend(batch)
        for _ in range(0 if args.concurrent else args.runs):
            time.sleep(args.idle)
            run = new_run_id()
            stagemarks.mark("submit called", run)
            client.submit(workflow, {"run": run}, run_id=run)
            stagemarks.mark("submit returned", run)
            client.run(run).result(timeout=120)
            stagemarks.mark("result returned", run)
            runs.append(run)
    finally:
        client.close()
        worker.terminate()
        worker.wait(timeout=30)
    stagemarks.write()
    timelines = [_timelines(marks_dir, db, runs)[run] for run in runs]
    submits = [w[0] for t in timelines if (w := walk(t, SUBMIT)) is not None]
    all_steps = [s for t in timelines for s in steps(t, step_chain)]
    results = [w[0] for t in timelines if (w := walk(t, RESULT, _last_tool_end(t))) is not None]
    acks = [s for t in timelines for s in steps(t, ACK)]
    floor = idle_round_trip(settings, floor_topic_for(settings), args.idle, n=args.runs)
    how = "submitted together" if args.concurrent else f"worker idle {args.idle}s before each"
    print(f"{len(runs)} runs of 40 steps ({args.workload} workload), {how}; marks in {marks_dir}")
    print(
        f"Kafka alone after the same idle (plain confluent-kafka, {floor['n']} records): produce -> consumed "
        f"median {floor['produce_to_consumed_median']} us (p90 {floor['produce_to_consumed_p90']}), "
        f"produce -> acked median {floor['produce_to_acked_median']} us\n"
    )
    for title, chain, found in (
        ("submit -> first model call", SUBMIT, submits),
        ("one step (model call -> tool call -> next model call)", step_chain, all_steps),
        ("last tool call -> Client.result returns", RESULT, results),
        ("each batch sent -> its broker ack (overlapped by a non-effect call)", ACK, acks),
    ):
        print("\n".join(table(title, chain, found)))
        print()


def _last_tool_end(timeline: Timeline) -> int:
    """Index of the run's last "call end tool" mark (where the result chain starts)."""
    ends = [i for i, (_, stage) in enumerate(timeline) if stage == "call end tool"]
    return ends[-1] if ends else len(timeline)


if __name__ == "__main__":
    main()
