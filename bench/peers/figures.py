"""The figures every engine's benchmark reports, rounded and named once (bench/peers/*_bench.py,
agent_*.py): L and T with the CPU over T, and R with what the recovery re-did."""

from __future__ import annotations

import statistics
from typing import Any

from bench.peers.workload import STEPS, replay_counts, steps_done


def latency_and_throughput(singles: list[float], t_runs: int, elapsed: float, cpu: float) -> dict[str, Any]:
    """``singles``: ms a step of each L run; ``elapsed`` and ``cpu``: seconds over the T stretch."""
    return {
        "L_ms_per_step": round(statistics.median(singles), 3),
        "L_runs": [round(x, 3) for x in singles],
        "T_steps_per_s": round(t_runs * STEPS / elapsed),
        "T_runs": t_runs,
        "CPU_ms_per_step": round(cpu * 1000 / (t_runs * STEPS), 3),
    }


def recovery(recovered: float, cpu: float, db: str, run: str, workload: str) -> dict[str, Any]:
    """R and R CPU in seconds, the crashed run's tool calls, and (sync workload) what was re-run."""
    return {
        "R_s": round(recovered, 3),
        "R_cpu_s": round(cpu, 3),
        "R_tool_calls": steps_done(db, run),
        **(replay_counts(db, run) if workload == "sync" else {}),
    }
