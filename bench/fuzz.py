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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.fuzzing import FuzzDeployment, cases

BATCH = 200


def main() -> int:
    logging.disable(logging.CRITICAL)  # a line per rejected case would cost more than the case
    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    fuzz = FuzzDeployment()
    started = time.monotonic()

    @settings(max_examples=-(-wanted // BATCH), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(cases(fuzz.serde), min_size=BATCH, max_size=BATCH))
    def batch_of_cases(batch: list) -> None:  # type: ignore[type-arg]
        fuzz.check([(case, fuzz.produce(case)) for case in batch], timeout=60)

    try:
        batch_of_cases()
    finally:
        fuzz.close()
    counts = dict(sorted(fuzz.counts.items()))
    print(json.dumps({"bench": "fuzz", "seconds": round(time.monotonic() - started, 1), **counts}))
    ok = counts.get("cases", 0) >= wanted and fuzz.failure is None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
