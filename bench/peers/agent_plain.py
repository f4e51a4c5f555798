"""The framework-agent workload on plain PydanticAI, no durability: the floor of L, T and CPU
(bench/compare_agents.py). One process runs the agents (``agent.run`` on its event loop, the sync
tools and model on PydanticAI's thread pool); its CPU is the process's.

    python -m bench.peers.agent_plain --workdir DIR --l-runs 3 --t-runs 200   # one JSON line
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any


def _run_name() -> str:
    return uuid.uuid4().hex[:20]


async def measure(l_runs: int, t_runs: int, idle_s: float = 0.5) -> dict[str, Any]:
    from bench.peers.agent_workload import STEPS, agent, prompt, run_key, tools

    bench_agent = agent(tools(run_key))

    async def one() -> None:
        await bench_agent.run(prompt(_run_name()))

    for _ in range(3):
        await one()
    singles = []
    for _ in range(l_runs):
        await asyncio.sleep(idle_s)
        started = time.time()
        await one()
        singles.append((time.time() - started) * 1000 / STEPS)
    await asyncio.gather(*(one() for _ in range(24)))
    await asyncio.sleep(1)
    cpu_before = time.process_time()
    started = time.time()
    await asyncio.gather(*(one() for _ in range(t_runs)))
    elapsed = time.time() - started
    cpu = time.process_time() - cpu_before
    return {
        "system": "plain",
        "L_ms_per_step": round(statistics.median(singles), 3),
        "L_runs": [round(x, 3) for x in singles],
        "T_steps_per_s": round(t_runs * STEPS / elapsed),
        "T_runs": t_runs,
        "CPU_ms_per_step": round(cpu * 1000 / (t_runs * STEPS), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    # the tools' SQLite file: read by bench/peers/workload.py when it is imported
    os.environ["E2E_DB"] = str(args.workdir / "e2e.db")
    print(json.dumps(asyncio.run(measure(args.l_runs, args.t_runs))), flush=True)


if __name__ == "__main__":
    main()
