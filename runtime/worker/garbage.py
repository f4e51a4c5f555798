"""Collecting the cyclic garbage that runs leave behind when they leave memory.

A worker runs the cyclic collector rarely (``Worker.run(tune_gc=True)``: 200,000 allocations between
young collections, a full one after 400 of those), so that stepping thousands of live runs does not
walk them again and again. A run that leaves memory -- evicted by the run cache, or ended -- frees
most of what it held by reference counting, but not what sits in reference cycles: a framework
agent's loop (PydanticAI's graph, its anyio task groups and cancel scopes, the exceptions that
cancelled them, with their frames) is mostly cycles. Those are promoted to the oldest generation
while the run is busy and wait there for a full collection that, at those thresholds, comes after
millions of allocations. Measured (10,000 PydanticAI runs waiting on one worker, a run cache of
500): the allocated blocks grew from 1.0 to 3.3 million while the runs reached their wait, all of it
garbage a ``gc.collect()`` freed at once; CPython's allocator cannot give back the arenas that
garbage was spread over, so RSS stayed at ~400-425 MB where ~1.0 million live blocks need far less.

So :class:`GarbageWatch` looks at the heap every ``CHECK_EVERY`` runs let go (an O(arenas) count,
``sys.getallocatedblocks``) and runs a full collection when the allocated blocks have grown by
``GROWTH`` of what the last collection left (and at least ``FLOOR_BLOCKS``): a worker whose runs
leave no cycles (native runs, mostly) never pays for it, one whose runs do collects in proportion
to the garbage, not to the live runs. What start-up loaded is frozen out of the walk
(``gc.freeze`` in ``Worker.run``), so a collection walks the runs in memory and the garbage.
"""

from __future__ import annotations

import gc
import sys

# Runs let go (evicted or ended) between two looks at the heap.
CHECK_EVERY = 100
# A collection once the allocated blocks exceed what the last one left by this fraction of it ...
GROWTH = 0.25
# ... and by at least this many blocks (~5-10 MB of small objects): a small heap is not collected
# for every few runs.
FLOOR_BLOCKS = 100_000


class GarbageWatch:
    """Counts the runs a worker lets go and collects the cycles they leave once the heap has grown."""

    def __init__(self) -> None:
        self._since = 0
        self._baseline = sys.getallocatedblocks()
        self.collections = 0

    def let_go(self, runs: int = 1) -> None:
        """``runs`` runs left memory (evicted or ended)."""
        self._since += runs
        if self._since < CHECK_EVERY:
            return
        self._since = 0
        blocks = sys.getallocatedblocks()
        # Live data that shrank (runs ended) lowers the bar, so garbage is measured from there.
        self._baseline = min(self._baseline, blocks)
        if blocks - self._baseline < max(FLOOR_BLOCKS, self._baseline * GROWTH):
            return
        gc.collect()
        self.collections += 1
        self._baseline = sys.getallocatedblocks()
