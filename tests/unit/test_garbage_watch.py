"""The worker's garbage watch (runtime.worker.garbage): the cycles runs leave when they leave memory
are collected once the heap has grown past what the last collection left, not before."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from runtime.worker import garbage
from runtime.worker.garbage import GarbageWatch

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None
        self.payload = [[i] for i in range(8)]


def leave_cycles(pairs: int) -> None:
    """``pairs`` pairs of objects that refer to each other, dropped: garbage only a collection frees."""
    for _ in range(pairs):
        a, b = Node(), Node()
        a.other, b.other = b, a


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """As in a worker, where the collector's own thresholds put full collections far apart."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_the_cycles_left_behind_are_collected_once_the_heap_has_grown(collector_paused: None) -> None:
    watch = GarbageWatch()
    before = sys.getallocatedblocks()
    leave_cycles(20_000)  # ~20 blocks a pair: ~400,000 blocks, past the floor and 25 %
    grown = sys.getallocatedblocks()
    assert grown - before > garbage.FLOOR_BLOCKS
    watch.let_go(garbage.CHECK_EVERY - 1)
    assert watch.collections == 0  # not looked at before CHECK_EVERY runs let go
    watch.let_go()
    assert watch.collections == 1
    assert sys.getallocatedblocks() < before + (grown - before) // 10  # the garbage is gone


def test_a_heap_that_does_not_grow_is_not_collected(collector_paused: None) -> None:
    watch = GarbageWatch()
    for _ in range(50):
        watch.let_go(garbage.CHECK_EVERY)
    assert watch.collections == 0
    leave_cycles(1_000)  # a little garbage: under the floor, left for the collector's own pace
    watch.let_go(garbage.CHECK_EVERY)
    assert watch.collections == 0
