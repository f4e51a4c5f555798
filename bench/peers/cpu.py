"""CPU time of processes from /proc (user + system, in seconds), for a CPU-per-step figure: read
before and after a measured stretch, by pid. Linux only; used by every *_bench.py in bench/peers."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (its threads included), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return (int(fields[11]) + int(fields[12])) / _TICKS


def total(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)
