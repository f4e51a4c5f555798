"""L, T, CPU, R and B of the framework-agent workload on Restate with its PydanticAI integration
(bench/peers/agent_restate_app.py), as shipped or with its serializer's ``TypeAdapter`` cached
(``--serde cached``): one JSON line on stdout. Runs in the peers' virtualenv.

L, T, CPU and R are bench/peers/restate_bench.py's (``Restate``, ``measure``: its own
restate-server, the service in a process of its own; CPU is restate-server's plus the service
process's; R from the fresh service process's start to the result, the server retrying on its
default policy).
B  bytes a step Restate's journal holds for a run: ``SUM(raw_length)`` of the invocation's rows
   of ``sys_journal`` (the admin API's SQL introspection: every command and notification entry,
   input and output included, as stored), over 40 -- median of ``--l-runs`` runs of the handler
   ``run_retained`` (the same agent with its journal kept after completion; Restate drops a
   finished invocation's journal by default). The invocation's status row and RocksDB's own
   overhead are not counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.peers import agent_workload
from bench.peers.restate_bench import Restate, measure, new_run

STEPS = agent_workload.STEPS


def journal_bytes(restate: Restate, invocation: str) -> int:
    answer = restate.http.post(
        f"{restate.admin}/query",
        json={"query": f"SELECT SUM(raw_length) AS bytes FROM sys_journal WHERE id = '{invocation}'"},
        headers={"accept": "application/json"},
    )
    answer.raise_for_status()
    return int(answer.json()["rows"][0]["bytes"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--port-base", type=int, default=29070)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    parser.add_argument("--serde", choices=("shipped", "cached"), default="shipped")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    env = {"RESTATE_SERDE_CACHED": "1" if args.serde == "cached" else "0"}
    restate = Restate(
        args.binary,
        args.workdir,
        args.port_base,
        args.workdir / "e2e.db",
        "run",
        "bench.peers.agent_restate_app",
        "Agent",
        env,
    )
    try:
        found: dict[str, Any] = measure(restate, args.l_runs, args.t_runs, "sync")
        if found["R_model_reruns"] or found["R_duplicate_effects"]:
            raise SystemExit(f"Restate: the recovery re-did what it must not: {found}")
        restate.handler = "run_retained"
        sizes = []
        for _ in range(args.l_runs):
            invocation = restate.send(new_run())
            restate.attach(invocation)
            sizes.append(journal_bytes(restate, invocation))
    finally:
        restate.close()
    found.pop("workload", None)
    found["system"] = f"restate-{args.serde}"
    found["B_per_step"] = round(statistics.median(sizes) / STEPS, 1)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
