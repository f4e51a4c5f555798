"""Where a restarted worker's recovery goes: from its process start (or, with ``--respawn``, from
the SIGKILL of ``agentlog worker --respawn``'s child) to the crashed run's result.

Each round: a fresh deployment of 12 partitions (as bench/compare.py's), a worker serving
bench/e2e_app.py's workflow of ``--workload`` (``agent``: the 40-step PydanticAI agent of
bench/compare_agents.py, bench/peers/agent_agentlog_app.py), three warm runs, then a crash run whose
worker is SIGKILLed in its 31st tool call (bench/peers/agentlog_bench.py). The process that takes over
runs with stage marks on (runtime.stagemarks, run ``START``: the points its start passes through,
one attribute test each when off), and the stages between those marks are printed per round
and as medians:

  spawn (or SIGKILL) -> interpreter up     Python's own start and site (``--respawn``: the fork)
  -> cli imported                          runtime.cli.main's imports: argparse, importlib.metadata,
                                           pydantic and the Settings model
  -> arguments parsed / settings built     the entry point of ``worker``, the parser, Settings()
  -> access checked                        confluent-kafka's import, the credentials/ACL check
  -> join and connect started              the consumer (joins the group in librdkafka's threads)
                                           and the producer created
  -> worker imported                       the serde, fastavro, the event classes, the worker's
                                           modules (while the join runs)
  -> app loaded / worker built / serving   the user's app, Worker(), the loop and the intake
  -> assignment polled                     the group's assignment reaches the intake's first poll:
                                           if the join was done by then, this is ~0
  -> assigned / claims acked               the hop to the loop; 12 EpochClaimed records acked
  -> partitions read / runs resumed        one read of the checkpoints and events; the replay
  -> first record sent                     the crash run's first record after its replay
  -> result                                steps 31-40 and the result reaching ``Client.result``

After the rounds: a join probe -- a bare confluent-kafka consumer with the workers' group
settings (runtime.log.kafka.group.consumer_config) and the same ``group.instance.id`` as the
stopped worker, timed from its creation to its assignment (does a takeover wait for the dead
member's session timeout? with static membership it must not) -- and, with ``--importtime``, one
more start of the worker under ``python -X importtime``, its import self-times summed by the
package that pulled each module in (the slower start of that pass is not in the rounds).

Run: `python bench/recovery.py [--rounds 3] [--workload async|sync|agent] [--respawn] [--importtime]`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment

from bench.peers.agentlog_bench import (
    APP,
    WORKER_ID,
    WORKFLOWS,
    _stop,
    _warm,
    _worker,
    child_of,
    crash_at_step_31,
)
from bench.peers.cpu import cpu_seconds
from runtime.client import Client
from runtime.config import Settings
from runtime.stagemarks import START

# Each workload's app and workflow.
WORKLOADS = {
    **{workload: (APP, workflow) for workload, workflow in WORKFLOWS.items()},
    "agent": ("bench.peers.agent_agentlog_app:app", "agent"),
}

# The start's marks in the order they are passed (runtime/cli, runtime/worker).
COLD = (
    "interpreter up",
    "cli imported",
    "arguments parsed",
    "settings built",
    "access checked",
    "join and connect started",
    "worker imported",
    "app loaded",
    "worker built",
    "serving",
    "assignment polled",
    "assigned",
    "claims acked",
    "partitions read",
    "runs resumed",
)
RESPAWN = ("forked", *COLD[COLD.index("join and connect started") :])


def _marks(marks_dir: Path, since_ns: int) -> tuple[dict[str, tuple[int, int]], dict[str, list[int]], int]:
    """Of the process that started after ``since_ns``: its start marks (stage -> wall ns, CPU us;
    the first of each), every run's "sent" marks, and its pid."""
    for path in sorted(marks_dir.glob("marks-*.tsv")):
        start: dict[str, tuple[int, int]] = {}
        sent: dict[str, list[int]] = defaultdict(list)
        for line in path.read_text().splitlines():
            ns, stage, run, position = line.split("\t")
            if run == START:
                start.setdefault(stage, (int(ns), int(position)))
            elif stage == "sent":
                sent[run].append(int(ns))
        first = min((ns for ns, _ in start.values()), default=0)
        if first >= since_ns:
            return start, sent, int(path.stem.split("-")[1])
    raise SystemExit(f"no stage marks of the process that took over in {marks_dir}")


def one_round(
    workdir: Path, workload: str, respawn: bool
) -> tuple[dict[str, float], dict[str, float], Settings]:
    """One crash and takeover; the stages' wall ms and CPU ms (of the process taking over)."""
    workdir.mkdir(parents=True)
    marks_dir = workdir / "marks"
    marks_dir.mkdir()
    settings = fresh_deployment(partitions=12, prefix="recovery")
    db = workdir / "e2e.db"
    client = Client(settings)
    marked = {"BENCH_STAGE_MARKS": str(marks_dir)}
    app, workflow = WORKLOADS[workload]
    if respawn:
        worker = _worker(settings, workdir, db, "once", "--respawn", app=app, **marked)
    else:
        worker = _worker(settings, workdir, db, "1", app=app)
    try:
        _warm(client, workflow)
        _run, run_id = crash_at_step_31(client, workflow, db)
        if respawn:
            os.kill(child_of(worker), signal.SIGKILL)
            zero = time.time_ns()
        else:
            worker.kill()
            worker.wait()
            zero = time.time_ns()
            worker = _worker(settings, workdir, db, "0", app=app, **marked)
        client.run(run_id).result(timeout=120)
        done = time.time_ns()
        taker = child_of(worker) if respawn else worker.pid
        cpu_done = cpu_seconds(taker) * 1e6
    finally:
        client.close()
        _stop(worker)  # a clean exit writes the marks
    start, sent, pid = _marks(marks_dir, zero)
    if pid != taker:
        raise SystemExit(f"the marks are of pid {pid}, the process that took over is {taker}")
    names = RESPAWN if respawn else COLD
    # The respawned child's CPU clock starts at the fork (the supervisor's is its own).
    points = [("SIGKILL" if respawn else "spawn", zero, 0)]
    points += [(name, *start[name]) for name in names if name in start]
    resumed = start.get("runs resumed", (zero, 0))[0]
    first_sent = min((ns for ns in sent.get(run_id, []) if ns >= resumed), default=None)
    if first_sent is not None:
        points.append(("first record sent", first_sent, -1))
    points.append(("result", done, round(cpu_done)))
    wall = {f"{a} -> {b}": (tb - ta) / 1e6 for (a, ta, _), (b, tb, _) in itertools.pairwise(points)}
    wall["total"] = (done - zero) / 1e6
    known = [(name, ns, cpu) for name, ns, cpu in points if cpu >= 0]
    cpu = {f"{a} -> {b}": (cb - ca) / 1e3 for (a, _, ca), (b, _, cb) in itertools.pairwise(known)}
    cpu["total"] = cpu_done / 1e3
    return wall, cpu, settings


def join_probe(settings: Settings) -> float:
    """ms from a consumer's creation, with the stopped worker's group.instance.id, to its
    assignment: what a takeover's join costs when no session timeout or rebalance is waited for."""
    from confluent_kafka import Consumer

    from runtime.log.kafka.group import consumer_config

    assigned: list[float] = []
    started = time.perf_counter()
    consumer = Consumer(consumer_config(settings, WORKER_ID, 10_000))
    consumer.subscribe(
        [settings.commands_topic],
        on_assign=lambda c, partitions: (assigned.append(time.perf_counter()), c.incremental_assign(partitions)),
    )
    deadline = time.monotonic() + 60
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.005)
    consumer.close()
    if not assigned:
        raise SystemExit("the join probe was not assigned within 60 s")
    return (assigned[0] - started) * 1000


def importtime(settings: Settings, workdir: Path, app: str) -> dict[str, float]:
    """One worker start under -X importtime: import self-time (ms) by the package that pulled it in."""
    from _deploy import start_worker

    log = workdir / "importtime.log"
    worker = start_worker(settings, WORKER_ID, log, app=app, PYTHONPROFILEIMPORTTIME="1")
    deadline = time.monotonic() + 60
    while '"worker_started"' not in log.read_text():
        if time.monotonic() > deadline or worker.poll() is not None:
            raise SystemExit(f"the importtime worker did not start: see {log}")
        time.sleep(0.05)
    _stop(worker)
    stdlib = sys.stdlib_module_names
    totals: dict[str, float] = defaultdict(float)
    stack: list[tuple[int, str]] = []  # (depth, package) of the imports enclosing the current one
    rows = [line.replace("import time:", "", 1).split("|") for line in log.read_text().splitlines()]
    rows = [row for row in rows if len(row) == 3 and row[0].strip().isdigit()]
    # importtime prints a module after the modules it imported: read backwards to see parents first.
    for self_us, _cumulative, name in reversed(rows):
        depth = (len(name) - len(name.lstrip())) // 2
        module = name.strip()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        top = module.split(".")[0]
        if top == "runtime":
            package = ".".join(module.split(".")[:2])
        elif top.startswith("_") or top in stdlib or top in ("encodings", "site"):
            package = ""
        else:
            package = {"pydantic_core": "pydantic", "annotated_types": "pydantic", "typing_inspection": "pydantic"}.get(
                top, top
            )
        owner = package or next((p for _, p in reversed(stack) if p), "") or "stdlib (interpreter, site)"
        stack.append((depth, package))
        totals[owner] += int(self_us) / 1000
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="sync")
    parser.add_argument("--respawn", action="store_true", help="agentlog worker --respawn, its child killed")
    parser.add_argument("--importtime", action="store_true", help="also one start under -X importtime")
    args = parser.parse_args()
    rounds: list[tuple[dict[str, float], dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="recovery-bench-") as tmp:
        settings = None
        for round_ in range(args.rounds):
            wall, cpu, settings = one_round(Path(tmp) / f"round-{round_}", args.workload, args.respawn)
            rounds.append((wall, cpu))
            print(
                json.dumps(
                    {
                        "round": round_ + 1,
                        "wall_ms": {k: round(v, 1) for k, v in wall.items()},
                        "cpu_ms": {k: round(v, 1) for k, v in cpu.items()},
                    }
                ),
                flush=True,
            )
        assert settings is not None
        probe = [join_probe(settings) for _ in range(3)]
        imports = importtime(settings, Path(tmp), WORKLOADS[args.workload][0]) if args.importtime else {}
    kind = "respawn (from the SIGKILL)" if args.respawn else "cold (from the new process's spawn)"
    print(f"\n{args.workload} workload, {kind}, per stage (rounds 1 / 2 / ...; median):\n")
    print("| stage | wall ms | median | CPU ms of the process taking over | median |")
    print("| --- | --- | --- | --- | --- |")

    def cells(values: list[float]) -> str:
        if not values:
            return "- | -"
        return f"{' / '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f}"

    for stage in rounds[0][0]:
        wall_ms = [w[stage] for w, _ in rounds if stage in w]
        cpu_ms = [c[stage] for _, c in rounds if stage in c]
        print(f"| {stage} | {cells(wall_ms)} | {cells(cpu_ms)} |")
    print(
        f"\njoin probe (a consumer with the stopped worker's group.instance.id, creation -> assignment): "
        f"{' / '.join(f'{p:.1f}' for p in probe)} ms"
    )
    if imports:
        total = sum(imports.values())
        print(f"\nimports of one start under -X importtime, self time by the package that pulled it in ({total:.0f} ms):\n")
        print("| package | ms | share |")
        print("| --- | --- | --- |")
        for package, ms in imports.items():
            if ms >= 1:
                print(f"| {package} | {ms:.1f} | {100 * ms / total:.0f}% |")


if __name__ == "__main__":
    main()
