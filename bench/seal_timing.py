"""``agentlog`` (runtime.cli) with every sealing call timed: what one AES-GCM seal costs inside a
busy worker, where the cipher's code and each run's key have left the CPU's caches since the
last call -- a loop that seals and does nothing else measures a warm call, a fraction of that.

``Cipher.seal_bytes`` is wrapped; every ``_EVERY`` calls the totals (calls, then nanoseconds inside
them) are written over ``$SEAL_TIMING_FILE``, so a reader takes the difference between two reads
around the stretch it measures. The timer's own two clock reads a call are inside the figure
(~0.1 us). bench/erasure.py ``--time-seals`` starts its worker with this module.

Run: ``SEAL_TIMING_FILE=F python -m bench.seal_timing worker --app ...``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from time import perf_counter_ns

from runtime.cli.main import main
from runtime.log.sealing import cipher

_EVERY = 500


def timed(path: Path) -> None:
    seal_bytes = cipher.Cipher.seal_bytes
    totals = [0, 0]  # calls, ns

    def seal_bytes_timed(self: cipher.Cipher, value: str, field: str) -> bytes:
        started = perf_counter_ns()
        try:
            return seal_bytes(self, value, field)
        finally:
            totals[1] += perf_counter_ns() - started
            totals[0] += 1
            if totals[0] % _EVERY == 0:
                path.write_text(f"{totals[0]} {totals[1]}\n")

    cipher.Cipher.seal_bytes = seal_bytes_timed  # type: ignore[method-assign]


def read(path: Path) -> tuple[int, int]:
    """(calls, ns) as last written; (0, 0) before the first write."""
    try:
        calls, ns = path.read_text().split()
    except (FileNotFoundError, ValueError):
        return 0, 0
    return int(calls), int(ns)


if __name__ == "__main__":
    timed(Path(os.environ["SEAL_TIMING_FILE"]))
    sys.exit(main())
