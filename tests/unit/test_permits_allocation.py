"""The coordinator's division of a capacity: max-min fair, spare spread, never over capacity, and a
cut applied before the capacity it frees is granted to another worker."""

from __future__ import annotations

import random

import pytest

from runtime.worker.limits.allocation import fair_targets, grants

pytestmark = pytest.mark.unit


def test_wants_that_fit_get_the_spare_spread_evenly() -> None:
    targets = fair_targets(60.0, {"a": 10.0, "b": 20.0, "c": 0.0}, whole=False)
    assert targets == pytest.approx({"a": 20.0, "b": 30.0, "c": 10.0})
    slots = fair_targets(5, {"a": 1, "b": 0, "c": 0}, whole=True)
    assert slots == {"a": 3, "b": 1, "c": 1}  # the spare 4: one each, the remainder in order


def test_wants_that_do_not_fit_are_max_min_fair() -> None:
    targets = fair_targets(60.0, {"a": 10.0, "b": 100.0, "c": 100.0}, whole=False)
    assert targets == pytest.approx({"a": 10.0, "b": 25.0, "c": 25.0})
    slots = fair_targets(5, {"a": 1, "b": 9, "c": 9}, whole=True)
    assert sum(slots.values()) == 5 and slots["a"] == 1 and min(slots["b"], slots["c"]) == 2


def test_a_single_slot_goes_round_the_workers_in_the_given_order() -> None:
    wants = {"a": 3, "b": 3, "c": 3}
    assert fair_targets(1, wants, whole=True, order=["b", "c", "a"]) == {"a": 0, "b": 1, "c": 0}
    assert fair_targets(1, wants, whole=True, order=["c", "a", "b"]) == {"a": 0, "b": 0, "c": 1}


def test_freed_capacity_is_granted_only_once_its_holder_gave_it_up() -> None:
    # a held all 5; now b wants 3: a is cut at once, b gets only what nobody is bound to
    targets = fair_targets(5, {"a": 2, "b": 3}, whole=True)
    assert targets == {"a": 2, "b": 3}
    first = grants(5, targets, bound={"a": 5}, whole=True)
    assert first == {"a": 2, "b": 0}
    # a reported the cut applied: its bound is 2, b may now have 3
    assert grants(5, targets, bound={"a": 2}, whole=True) == {"a": 2, "b": 3}
    # a dead worker's lease still binds capacity until it runs out
    assert grants(5, targets, bound={"a": 2, "dead": 2}, whole=True) == {"a": 2, "b": 1}


def test_never_over_capacity_whatever_the_wants_and_bounds() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        whole = rng.random() < 0.5
        capacity = float(rng.randint(1, 20)) if whole else rng.uniform(1, 100)
        workers = [f"w{i}" for i in range(rng.randint(1, 5))]
        wants = {w: float(rng.randint(0, 10)) if whole else rng.uniform(0, 50) for w in workers}
        # what they may be using: a valid state never over capacity
        bound: dict[str, float] = {}
        left = capacity
        for w in [*workers, "gone"]:
            share = float(rng.randint(0, int(left))) if whole else rng.uniform(0, left)
            bound[w] = share
            left -= share
        targets = fair_targets(capacity, wants, whole)
        assert sum(targets.values()) <= capacity + 1e-6
        granted = grants(capacity, targets, bound, whole)
        # what may be in use once these grants land: for each worker, the larger of old and new
        in_use = sum(max(granted.get(w, 0.0), bound.get(w, 0.0)) for w in {*granted, *bound})
        assert in_use <= capacity + 1e-6, (capacity, wants, bound, granted)
        if whole:
            assert all(float(v).is_integer() for v in granted.values())
        for w in workers:
            assert granted[w] <= max(targets[w], bound.get(w, 0.0)) + 1e-9
