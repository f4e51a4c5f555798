"""Opt-in stage marks: wall-clock timestamps of the points one step and one submit/result pass
through, for bench/stages.py to split where the time goes, and of a worker's start (run ``START``),
for bench/recovery.py.

Off unless ``BENCH_STAGE_MARKS`` names a directory (read once, at import). A step's marks are
taken at a few seams only -- the commands' intake, a call (its Scheduled ack, its start and end),
the batcher (each record appended, each batch sent), the writer (each broker ack) and the client's
tail -- and each tests ``stagemarks.ON`` before anything else, so the normal path pays one
attribute read. A start's marks (once per process) call :func:`start`, which tests it. When on, each
process keeps ``(ns, stage, run, position)`` tuples in memory and writes them at exit to
``<dir>/marks-<pid>.tsv``: writing per mark would put a system call into the very stages measured.
Times are ``time.time_ns()`` (CLOCK_REALTIME) so that marks of the client's and the worker's
processes on one machine share a clock.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path

_DIR = os.environ.get("BENCH_STAGE_MARKS", "")
ON = bool(_DIR)

# The "run" of the marks a worker's start passes through (bench/recovery.py: process start -> the
# crashed run's result), apart from any run's own; their position is the process's CPU time (us).
START = "(start)"

# This process's marks, under its pid: a forked child (a respawned worker) starts its own list.
_marks: dict[int, list[tuple[int, str, str, int]]] = {}


def mark(stage: str, run: str | bytes | None, position: int = -1) -> None:
    """Note that ``run`` (its call at ``position``, if any) reached ``stage`` now."""
    now = time.time_ns()
    pid = os.getpid()
    marks = _marks.get(pid)
    if marks is None:
        _marks.clear()
        marks = _marks[pid] = []
        atexit.register(write)
    if isinstance(run, bytes):
        run = run.decode(errors="replace")
    marks.append((now, stage, run or "", position))


def write() -> None:
    """Write this process's marks (atexit does; a benchmark's own process may call it earlier)."""
    if not ON:
        return
    marks = _marks.get(os.getpid())
    if not marks:
        return
    path = Path(_DIR) / f"marks-{os.getpid()}.tsv"
    with path.open("a") as out:
        out.writelines(f"{ns}\t{stage}\t{run}\t{position}\n" for ns, stage, run, position in marks)
    marks.clear()


def enable(directory: str) -> None:
    """Turn marks on in this process (a benchmark's own; workers it starts get the variable)."""
    global _DIR, ON
    _DIR, ON = directory, True


def start(stage: str) -> None:
    """Note that this worker's start reached ``stage``, with the CPU time it has used so far (on a
    machine shared with other work, wall time between two marks also counts the waits for a core).
    Nothing when marks are off."""
    if ON:
        mark(stage, START, time.process_time_ns() // 1000)
