"""bench/compare.py's table: every system measured gets a column (Temporal among them), none that
was not, and each peer's column carries agentlog's L and T over its own, round by round."""

from __future__ import annotations

from typing import Any

import pytest

from bench.compare import table

pytestmark = pytest.mark.unit


def _row(system: str, round_: int, l_ms: float, t: float, r_s: float) -> dict[str, Any]:
    return {
        "system": system,
        "workload": "sync",
        "round": round_,
        "L_ms_per_step": l_ms,
        "T_steps_per_s": t,
        "T_runs": 200 if system != "temporal" else 50,
        "CPU_ms_per_step": 0.2,
        "R_s": r_s,
        "R_cpu_s": 0.3,
        "R_model_reruns": 0,
        "R_duplicate_effects": 0,
    }


def test_a_column_per_measured_system_with_agentlog_s_ratios_to_it() -> None:
    results = [
        _row("agentlog", 1, 2.0, 4000, 0.4),
        _row("restate", 1, 4.0, 1000, 0.8),
        _row("temporal", 1, 40.0, 25, 4.0),
    ]
    lines = table(results, "sync").splitlines()
    assert (
        lines[2]
        == "| figure (rounds 1 / 2 / 3) | agentlog | Restate 1.7.12 | Temporal 1.32 dev server (SQLite, WAL) |"
    )
    rows = [line for line in lines if line.startswith("| ")]
    assert all(line.count(" | ") == 3 for line in rows), rows  # a label and three systems: no DBOS
    speed = next(line for line in lines if line.startswith("| agentlog's L / this L"))
    assert speed.endswith("| - | 0.50x; 4.0x | 0.05x; 160.0x |")
    recovery = next(line for line in lines if line.startswith("| R / Restate's cold R"))
    assert recovery.endswith("| 0.50x | - | 5.00x |")
    t_row = next(line for line in lines if line.startswith("| T, steps/s"))
    assert "25 (median 25), N=50" in t_row
