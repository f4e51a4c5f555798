"""Is this worker ready (``/readyz``)? Ready means it holds what the group gave it: its partitions
claimed, their runs rebuilt and resumed. Not ready while it starts or waits for its first
assignment, while it claims and rebuilds, once a newer epoch fenced it off a partition (until the
group assigns afresh), and once it stops.

Written by the worker's loop, read by the probe's thread: one attribute holding the reason (a
string or None), replaced whole, so a reader never sees half an update. ``short_of`` is the
resource watch's (runtime.worker.resources), written by its thread the same way: a worker that
holds its partitions but is short of descriptors, threads or memory is not ready either.
"""

from __future__ import annotations


class Readiness:
    """The reason the worker is not ready, or None when it is."""

    def __init__(self) -> None:
        self.reason: str | None = "starting: no partitions assigned by the workers' group yet"
        self._stopping = False
        self.short_of: str | None = None  # e.g. "descriptors: 235 of 256 in use"

    def __call__(self) -> str | None:
        reason, short_of = self.reason, self.short_of
        if short_of is None:
            return reason
        return short_of if reason is None else f"{reason}; {short_of}"

    def assigning(self, partitions: list[int]) -> None:
        if not self._stopping:
            self.reason = f"claiming and rebuilding partitions {sorted(partitions)}"

    def assigned(self) -> None:
        if not self._stopping:
            self.reason = None

    def lost(self, partition: int, why: str) -> None:
        """A partition was lost; a fence (a newer epoch's claim) makes the worker not ready: the
        group has not taken the partition from it, another worker has."""
        if why.startswith("fenced") and not self._stopping:
            self.reason = f"partition {partition} {why}"

    def fenced(self, why: str) -> None:
        """The workers' group fenced this worker's membership: it rejoins, and is ready again once
        the group assigns it partitions and they are rebuilt."""
        if not self._stopping:
            self.reason = f"fenced by the workers' group ({why}); rejoining"

    def failed(self, why: str) -> None:
        self._stopping = True
        self.reason = f"failing: {why}"

    def stopping(self) -> None:
        if not self._stopping:
            self._stopping = True
            self.reason = "stopping"
