"""The same PydanticAI agent on agentlog, DBOS, Restate and plain PydanticAI, in one sitting.

The workload is bench/peers/agent_workload.py's, the same agent everywhere: 40 steps, each a model
request (a ``FunctionModel`` in-process: no weights, no network, the same cost in every engine) and
a sync tool call that commits one SQLite row; the tool at steps 14, 22 and 30 is an effect keyed
so it applies once. Each engine runs it as it asks (bench/peers/agent_*.py):

agentlog        ``AgentlogDurability`` + ``run_agent`` in a workflow, one worker, 12 partitions
dbos            PydanticAI's ``DBOSDurability`` in a ``@DBOS.workflow``, tools ``@DBOS.step()``, SQLite
restate-shipped ``restate.ext.pydantic.RestateAgent(auto_wrap_tools=True)``, restate-server 1.7.12
restate-cached  the same, its serializer's ``TypeAdapter`` built once per type, not once per call
temporal        PydanticAI's ``TemporalDurability`` in a workflow (``PydanticAIPlugin``), Temporal's dev
                server on SQLite (WAL), the activity options of bench/compare.py's Temporal
plain           plain PydanticAI, no durability: the floor of L, T and CPU

and each measures (medians over the rounds; every engine every round, the order rotated):
L    ms per step of one run on an idle engine, submit -> result / 40 (median of --l-runs)
T    steps/s, N runs submitted from one client then awaited together
CPU  ms of CPU per step over T: agentlog's worker process (the broker's not counted); DBOS's one
     process; restate-server + the service process; plain's one process
R    s from a fresh process's start (the one running the run SIGKILLed in its 31st tool call
     and reaped) to the crashed run's result; R CPU, the fresh process's CPU to then (Restate: the
     service process's + restate-server's over the same stretch). Each recovery is checked: no
     model request of steps 1-30 re-sent, no effect applied twice
B    bytes the engine stores a step for a run: agentlog, the key + value of the run's records on
     the events and payloads topics; DBOS, the content of the run's rows in its system tables
     (and ``B file``: the SQLite files over every step they hold); Restate, ``SUM(raw_length)`` of
     the invocation's ``sys_journal`` rows; Temporal, the workflow's ``historySizeBytes`` (see each
     module for what is left out)

Also, once a sitting: the native refund-40 agent's bytes a step (bench/refund40.py B), and the
issue-37 framework targets as measured / target.

Prints one JSON line per engine and round, then the table. Restate and DBOS run in the peers'
virtualenv (bench/peers/install.sh; `make compare` runs it). Restate's ports: --restate-port-base
.. +2 and +10; Temporal's: --temporal-port-base .. +2.

Run: `make compare-agents` (or `make compare`, which runs it after bench/compare.py), or
`python bench/compare_agents.py [--rounds 3] [--l-runs 3] [--t-runs 200] [--dbos-t-runs 100]
[--temporal-t-runs 50] [--only agentlog|dbos|restate-shipped|restate-cached|temporal|plain ...]`.
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

from bench.peers import agent_agentlog

PEERS = ROOT / ".agentlog" / "peers"
PEERS_PYTHON = PEERS / "venv" / "bin" / "python"
RESTATE_SERVER = PEERS / "package" / "bin" / "restate-server"
TEMPORAL_CLI = PEERS / "venv" / "bin" / "temporal"
SYSTEMS = ("agentlog", "dbos", "restate-shipped", "restate-cached", "temporal", "plain")
TITLES = {
    "agentlog": "agentlog",
    "dbos": "DBOS 3.4 (SQLite)",
    "restate-shipped": "Restate 1.7.12, as shipped",
    "restate-cached": "Restate, serializer cached",
    "temporal": "Temporal 1.32 dev server (SQLite, WAL)",
    "plain": "plain PydanticAI",
}
# figure key, its label, whether more is better
FIGURES = (
    ("L_ms_per_step", "L, ms a step (one run, submit -> result / 40)", False),
    ("T_steps_per_s", "T, steps/s (N runs at once)", True),
    ("CPU_ms_per_step", "CPU, ms a step over T", False),
    ("R_s", "R, s (fresh process -> crashed run's result)", False),
    ("R_cpu_s", "R CPU, s", False),
    ("B_per_step", "B, bytes stored a step", False),
    ("B_file_per_step", "B file, bytes a step (DBOS: SQLite files)", False),
)
AHEAD_ON = ("L_ms_per_step", "T_steps_per_s", "R_s", "B_per_step", "CPU_ms_per_step")


def _subprocess(python: Path, module: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), "-m", module, *args],
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


def measure(system: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    sizes = ["--l-runs", str(args.l_runs)]
    if system == "agentlog":
        return agent_agentlog.measure(workdir, args.l_runs, args.t_runs)
    if system == "plain":
        return _subprocess(
            Path(sys.executable),
            "bench.peers.agent_plain",
            "--workdir",
            str(workdir),
            *sizes,
            "--t-runs",
            str(args.t_runs),
        )
    if system == "dbos":
        return _subprocess(
            PEERS_PYTHON, "bench.peers.agent_dbos", "bench", "--workdir", str(workdir), *sizes,
            "--t-runs", str(args.dbos_t_runs),
        )  # fmt: skip
    if system == "temporal":
        return _subprocess(
            PEERS_PYTHON, "bench.peers.agent_temporal", "--binary", str(TEMPORAL_CLI), "--workdir", str(workdir),
            *sizes, "--t-runs", str(args.temporal_t_runs), "--port-base", str(args.temporal_port_base),
        )  # fmt: skip
    return _subprocess(
        PEERS_PYTHON, "bench.peers.agent_restate", "--binary", str(RESTATE_SERVER), "--workdir", str(workdir),
        *sizes, "--t-runs", str(args.t_runs), "--serde", system.removeprefix("restate-"),
        "--port-base", str(args.restate_port_base),
    )  # fmt: skip


def native_bytes() -> dict[str, Any]:
    """bench/refund40.py's B line: the native refund-40 agent's bytes a step on the events topic."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "refund40.py"), "B"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    found = next((line for line in lines if line.get("metric") == "B"), None)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"bench/refund40.py B failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return found


def medians(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for system in SYSTEMS:
        mine = [r for r in results if r["system"] == system]
        found[system] = {
            key: statistics.median(r[key] for r in mine if key in r)
            for key, _, _ in FIGURES
            if any(key in r for r in mine)
        }
    return found


def table(results: list[dict[str, Any]], native: dict[str, Any] | None) -> str:
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]
    middle = medians(results)
    ours = middle.get("agentlog", {})

    def cell(system: str, key: str) -> str:
        values = [r[key] for r in results if r["system"] == system and key in r]
        if not values:
            return "-"
        shown = f"{statistics.median(values):g}"
        if len(values) > 1:
            shown += f" ({' / '.join(f'{v:g}' for v in values)})"
        if system != "agentlog" and key in ours and ours[key]:
            shown += f"; {statistics.median(values) / ours[key]:.2f}x agentlog's"
        return shown

    runs = {s: next((r["T_runs"] for r in results if r["system"] == s), 0) for s in systems}
    rows = [
        "The 40-step PydanticAI agent (median (rounds); ratio to agentlog's median):",
        "",
        "| figure | " + " | ".join(TITLES[s] for s in systems) + " |",
        "| --- |" + " --- |" * len(systems),
    ]
    for key, label, _ in FIGURES:
        if any(key in r for r in results):
            rows.append(f"| {label} | " + " | ".join(cell(s, key) for s in systems) + " |")
    rows.append("| T's N runs | " + " | ".join(str(runs[s]) for s in systems) + " |")
    rows.append(
        "| recoveries: model requests of steps 1-30 re-sent / effects applied twice | "
        + " | ".join(
            " ".join(
                f"{r['R_model_reruns']}/{r['R_duplicate_effects']}"
                for r in results
                if r["system"] == s and "R_model_reruns" in r
            )
            or "-"
            for s in systems
        )
        + " |"
    )
    rows += ["", "Issue 37's framework targets, measured / target:", ""]
    if native is not None and "B_per_step" in ours:
        native_b = float(native["avro_key_plus_value"])
        rows.append(
            f"- bytes a step, PydanticAI agent / native refund-40 agent: {ours['B_per_step']:g} / {native_b:g} = "
            f"{ours['B_per_step'] / native_b:.2f}x (target <= 2x)"
        )
    if "L_ms_per_step" in ours and "L_ms_per_step" in middle.get("plain", {}):
        plain = middle["plain"]["L_ms_per_step"]
        rows.append(
            f"- time a step, agentlog / plain PydanticAI: {ours['L_ms_per_step']:g} / {plain:g} ms = "
            f"{ours['L_ms_per_step'] / plain:.2f}x (target <= 1.5x)"
        )
    for system in ("dbos", "restate-shipped", "restate-cached", "temporal"):
        if system not in middle or not ours:
            continue
        verdicts = []
        for key, label, more_is_better in FIGURES:
            if key not in AHEAD_ON or key not in ours or key not in middle[system]:
                continue
            theirs = middle[system][key]
            ahead = ours[key] > theirs if more_is_better else ours[key] < theirs
            verdicts.append(
                f"{label.split(',')[0]} {'ahead' if ahead else 'BEHIND'} ({ours[key]:g} vs {theirs:g})"
            )
        rows.append(f"- agentlog vs {TITLES[system]} (target: ahead on all): " + "; ".join(verdicts))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    parser.add_argument("--dbos-t-runs", type=int, default=100, help="DBOS is slower per run here")
    parser.add_argument("--only", choices=SYSTEMS, action="append", help="measure only these engines")
    parser.add_argument("--temporal-t-runs", type=int, default=50, help="Temporal is slower per run here")
    parser.add_argument("--restate-port-base", type=int, default=29070)
    parser.add_argument("--temporal-port-base", type=int, default=29170)
    parser.add_argument("--no-native", action="store_true", help="skip the native refund-40 agent's bytes")
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the uncounted agentlog run that warms the Kafka broker's JVM before round 1",
    )
    args = parser.parse_args()
    systems = list(args.only or SYSTEMS)
    peers = {"dbos", "restate-shipped", "restate-cached", "temporal"} & set(systems)
    if peers and not (PEERS_PYTHON.exists() and RESTATE_SERVER.exists() and TEMPORAL_CLI.exists()):
        raise SystemExit(
            "Restate, Temporal and DBOS are not installed: run `bench/peers/install.sh` (or `make compare`)"
        )
    # R is mostly imports: neither side may compile its modules at each start (bench/bytecode.py).
    require_compiled(sys.executable, ["runtime", "pydantic", "pydantic_ai", "confluent_kafka"])
    if peers:
        require_compiled(PEERS_PYTHON, ["pydantic_ai", "restate", "temporalio", "dbos"])
    results: list[dict[str, Any]] = []
    native = None
    with tempfile.TemporaryDirectory(prefix="agentlog-compare-agents-") as tmp:
        if "agentlog" in systems and not args.no_warm_up:
            warm = agent_agentlog.measure(Path(tmp) / "warm-up", 1, 24)
            print(json.dumps({"warm_up": True, "not_counted": True, **warm}), flush=True)
        if not args.no_native:
            native = native_bytes()
            print(json.dumps({"native_refund40": True, **native}), flush=True)
        for round_ in range(args.rounds):
            order = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
            for system in order:
                found = measure(system, Path(tmp) / f"{system}-{round_}", args)
                found["round"] = round_ + 1
                results.append(found)
                print(json.dumps(found), flush=True)
    results.sort(key=lambda r: r["round"])
    print(table(results, native), flush=True)


if __name__ == "__main__":
    main()
