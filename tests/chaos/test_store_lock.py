"""The store lock dies with its holder: a process holding it is SIGKILLed (no service needed,
so it runs with the unit tests too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analytics.store import StoreLock, parse_dsn

pytestmark = [pytest.mark.unit, pytest.mark.chaos]


def test_the_store_lock_is_exclusive_across_processes_and_dies_with_its_holder(tmp_path: Path) -> None:
    location = parse_dsn(f"chdb://{tmp_path / 'store'}")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from analytics.store import StoreLock, parse_dsn;"
            f"lock = StoreLock(parse_dsn('chdb://{tmp_path / 'store'}')); assert lock.try_acquire();"
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = StoreLock(location)
        assert not lock.try_acquire()
        assert lock.holder() == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert lock.try_acquire()  # the kernel released it with the process
    lock.release()
