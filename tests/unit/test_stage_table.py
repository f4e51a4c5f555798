"""bench/stage_table.py: stage chains walked over one run's marks, and the gaps between them."""

from __future__ import annotations

import pytest

from bench.stage_table import gaps, p90, steps, table, walk

pytestmark = pytest.mark.unit

CHAIN = ("start", "sent", "acked")


def test_walk_takes_each_stage_first_mark_after_the_previous_and_skips_others() -> None:
    timeline = [(5, "acked"), (10, "start"), (12, "noise"), (15, "sent"), (16, "sent"), (30, "acked")]
    assert walk(timeline, CHAIN) == ([10, 15, 30], 1)


def test_walk_is_none_when_a_stage_never_comes_after_its_predecessor() -> None:
    assert walk([(1, "acked"), (2, "start"), (3, "sent")], CHAIN) is None


def test_steps_share_their_boundary_stage_with_the_next_step() -> None:
    chain = ("model", "tool", "model")
    timeline = [(0, "model"), (4, "tool"), (10, "model"), (13, "tool"), (20, "model"), (22, "tool")]
    assert steps(timeline, chain) == [[0, 4, 10], [10, 13, 20]]


def test_gaps_are_per_transition_across_chains() -> None:
    assert gaps([[0, 4, 10], [10, 13, 20]]) == [[4, 3], [6, 7]]


def test_p90_is_the_value_at_the_ninetieth_percentile_rank() -> None:
    assert p90(list(range(1, 11))) == 10.0
    assert p90(list(range(1, 101))) == 91.0


def test_table_prints_medians_in_microseconds_and_the_whole_chain() -> None:
    rows = table("t", ("a", "b", "c"), [[0, 1_000, 4_000], [0, 3_000, 4_000], [0, 2_000, 6_000]])
    assert rows[0] == "t (3 samples)"
    assert rows[2].split() == ["a", "->", "b", "2.0", "3.0", "40.0%"]
    assert rows[3].split() == ["b", "->", "c", "3.0", "4.0", "60.0%"]
    assert rows[-2].split()[-1] == "5.0"  # sum of medians
    assert rows[-1].split()[-2:] == ["4.0", "6.0"]


def test_table_says_so_when_no_chain_was_complete() -> None:
    assert table("t", CHAIN, []) == ["t: no complete chain found"]


def test_steps_leave_out_a_walk_that_spans_another_start_of_the_chain() -> None:
    # The second step's marks come in another order (an effect waits before its call): walking
    # "model, tool, acked, model" from it runs into the third step, and is not a step.
    chain = ("model", "tool", "acked", "model")
    timeline = [
        (0, "model"), (2, "tool"), (3, "acked"),
        (10, "model"), (11, "acked"), (12, "tool"),
        (20, "model"), (21, "tool"), (22, "acked"),
        (30, "model"),
    ]  # fmt: skip
    assert steps(timeline, chain) == [[0, 2, 3, 10], [20, 21, 22, 30]]
