"""How long ``agentlog worker --respawn`` waits before forking a dead worker again
(runtime.worker.supervisor.respawn_delay): a first death at once, a run of quick deaths slower."""

from __future__ import annotations

import pytest

from runtime.worker.supervisor import FIRST_BACKOFF_S, MAX_BACKOFF_S, respawn_delay

pytestmark = pytest.mark.unit


def test_a_worker_that_lived_or_died_once_is_respawned_at_once() -> None:
    assert respawn_delay(0) == 0.0  # it lived HEALTHY_AFTER_S or more
    assert respawn_delay(1) == 0.0  # one quick death (killed at a step 3 s after its start)


def test_quick_deaths_in_a_row_back_off_doubling_up_to_the_cap() -> None:
    delays = [respawn_delay(n) for n in range(2, 12)]
    assert delays[:3] == [FIRST_BACKOFF_S, 2 * FIRST_BACKOFF_S, 4 * FIRST_BACKOFF_S]
    assert delays == sorted(delays)
    assert delays[-1] == MAX_BACKOFF_S
