"""A long set-up step (Maven fetching jars, Go building the registry) run with a line of progress
every few seconds, so a newcomer's first ``make`` never sits silent for a minute."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

EVERY = 10.0  # seconds between progress lines


class StepTimeout(Exception):
    """The step ran past its deadline (it has been killed)."""


def run_step(
    argv: Sequence[str],
    *,
    what: str,
    progress: Callable[[str], None],
    log: IO[bytes],
    measure: Callable[[], str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    every: float = EVERY,
) -> int:
    """Run ``argv`` with its output in ``log``; every ``every`` seconds report ``what``, the time
    so far and ``measure()`` (how far it is: jars fetched, modules downloaded). The exit code."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    next_report = started + every
    while True:
        try:
            code = proc.wait(
                timeout=max(0.0, min(next_report, started + (timeout or 1e9)) - time.monotonic())
            )
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if timeout is not None and now - started >= timeout:
                proc.kill()
                proc.wait()
                raise StepTimeout(f"{what} took more than {timeout:.0f} s") from None
            if now >= next_report:
                detail = f", {measure()}" if measure is not None else ""
                progress(f"  ... {what}: {now - started:.0f} s{detail}")
                next_report = now + every
            continue
        elapsed = time.monotonic() - started
        if elapsed >= every:
            progress(f"  ... {what}: done in {elapsed:.0f} s")
        return int(code)


def files_under(folder: Path, pattern: str) -> tuple[int, int]:
    """How many files under ``folder`` match ``pattern``, and their bytes (0, 0 if none yet)."""
    count = size = 0
    try:
        for path in folder.rglob(pattern):
            try:
                size += path.stat().st_size
            except OSError:  # a file the tool is still moving
                continue
            count += 1
    except OSError:
        return 0, 0
    return count, size
