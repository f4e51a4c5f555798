"""CPU time of processes from /proc (user + system, in seconds), for a CPU-per-step figure: read
before and after a measured stretch, by pid. Linux only; used by every *_bench.py in bench/peers."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _name_and_seconds(stat: str) -> tuple[str, float]:
    """The comm and utime + stime of a /proc .../stat line."""
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return stat[stat.index("(") + 1 : stat.rindex(")")], (int(fields[11]) + int(fields[12])) / _TICKS


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (its threads included), from /proc/PID/stat."""
    return _name_and_seconds(Path(f"/proc/{pid}/stat").read_text())[1]


def thread_seconds(pid: int) -> dict[str, tuple[str, float]]:
    """Thread id -> (thread name, utime + stime) of each of ``pid``'s threads (/proc/PID/task)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[task.name] = _name_and_seconds((task / "stat").read_text())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return found


def machine_busy_seconds() -> float:
    """CPU seconds the machine spent not idle nor waiting on I/O, all cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICKS


def total(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)
