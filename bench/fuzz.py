"""Fuzzed input at volume: ``python bench/fuzz.py [CASES]`` (default 100,000).

The harness of tests/unit/test_fuzz_commands.py (tests/support/fuzzing.py): hypothesis draws
batches of commands -- random bytes, corrupt RunSubmitted frames, fuzzed workflow names and
JSON text, any JSON value as a workflow input, no key / empty key / a key that is not UTF-8 /
the wrong partition -- and one real worker on the in-memory log handles them. Every case must end
with a reason (RunRejected, RunFailed) or complete (an echo's result equal to its input); the
worker must stay up and every partition keep moving. Prints one JSON line with the counts.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.fuzzing import FuzzDeployment, cases

BATCH = 200
CHUNK = 10_000  # cases per deployment: the in-memory log copies a partition on every read


def chunk(cases_wanted: int) -> tuple[Counter[str], BaseException | None]:
    """``cases_wanted`` cases against a fresh worker and log; their counts and the worker's death."""
    fuzz = FuzzDeployment()

    @settings(
        max_examples=-(-cases_wanted // BATCH), deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(st.lists(cases(fuzz.serde), min_size=BATCH, max_size=BATCH))
    def batch_of_cases(batch: list) -> None:  # type: ignore[type-arg]
        fuzz.check([(case, fuzz.produce(case)) for case in batch], timeout=60)

    try:
        batch_of_cases()
    finally:
        fuzz.close()
    return fuzz.counts, fuzz.failure


def main() -> int:
    logging.disable(logging.CRITICAL)  # a line per rejected case would cost more than the case
    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    started = time.monotonic()
    totals: Counter[str] = Counter()
    failure: BaseException | None = None
    while totals["cases"] < wanted and failure is None:
        counts, failure = chunk(min(CHUNK, wanted - totals["cases"]))
        totals.update(counts)
        print(json.dumps({"progress": totals["cases"], "seconds": round(time.monotonic() - started, 1)}), flush=True)
    print(json.dumps({"bench": "fuzz", "seconds": round(time.monotonic() - started, 1), **dict(sorted(totals.items()))}))
    return 0 if totals["cases"] >= wanted and failure is None else 1


if __name__ == "__main__":
    sys.exit(main())
