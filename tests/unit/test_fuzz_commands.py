"""Fuzzed commands, submission JSON and workflow inputs against a real worker on the in-memory log
(tests/support/fuzzing.py): every case ends with a reason or completed, the worker never dies, no
partition stalls. ``bench/fuzz.py`` runs the same for 100,000+ cases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.fuzzing import FuzzDeployment, cases

pytestmark = pytest.mark.unit

BATCH = 20


@pytest.fixture(scope="module")
def fuzz() -> Iterator[FuzzDeployment]:
    deployment = FuzzDeployment()
    yield deployment
    deployment.close()
    print(f"fuzz counts: {dict(sorted(deployment.counts.items()))}")


def test_every_fuzzed_command_ends_with_a_reason_or_completes(fuzz: FuzzDeployment) -> None:
    deployment = fuzz

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(cases(deployment.serde), min_size=BATCH, max_size=BATCH))
    def batch_of_cases(batch: list) -> None:  # type: ignore[type-arg]
        produced = [(case, deployment.produce(case)) for case in batch]
        deployment.check(produced)

    batch_of_cases()
    counts = deployment.counts
    assert counts["cases"] >= 40 * BATCH
    # The mix reached every outcome: rejected, failed (workflow code on odd input) and completed.
    assert counts["rejected"] and counts["failed"] and counts["completed"], counts
    assert counts["kind:input"] and counts["kind:raw-bytes/no-key"], counts
