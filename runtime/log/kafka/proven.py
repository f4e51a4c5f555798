"""Up to where an owned partition is proven free of a newer claim, without reading our own writes.

A claim (``EpochClaimed``) is a record without a key; the ownership check fences only on those.
A keyed record this worker's producer appended is therefore proven not to be one the moment its
ack names its offset: nothing else can sit at that offset. So the proven prefix of a partition
(every offset below ``upto``) grows two ways:

- by our acks (:meth:`ours`): an acked keyed record at ``upto`` extends it at once; one above
  ``upto`` leaves a gap -- a record someone else wrote, or one of ours not counted (a keyless
  record, one acked before the watch began) -- and is kept aside, in runs of consecutive offsets;
- by reading (:meth:`read_to`): the ownership tail read the records below an offset and met no
  claim; the runs kept aside that the prefix then reaches are taken in.

Only a gap is ever read: under steady writes by the owner alone there is none. The producer is
idempotent and acks a partition's records in order, so the runs kept aside are in offset order
and, with no foreign writer, there is at most one.
"""

from __future__ import annotations


class ProvenPrefix:
    """One owned partition's proof: no claim below ``upto`` (after the owner's own claim)."""

    __slots__ = ("_ahead", "upto")

    def __init__(self, start: int) -> None:
        self.upto = start
        self._ahead: list[list[int]] = []  # [start, end) runs of our acked offsets above a gap

    def ours(self, offset: int) -> bool:
        """A keyed record we appended was acked at ``offset``; True if the proof grew."""
        if offset < self.upto:
            return False
        if offset == self.upto:
            self.upto = offset + 1
            self._take_in()
            return True
        last = self._ahead[-1] if self._ahead else None
        if last is not None and offset == last[1]:
            last[1] = offset + 1
        elif last is None or offset > last[1]:
            self._ahead.append([offset, offset + 1])
        # else: out of order (not from one idempotent producer): left to the reading, as any gap
        return False

    def read_to(self, offset: int) -> bool:
        """Every record below ``offset`` was read and none was a claim; True if the proof grew."""
        if offset <= self.upto:
            return False
        self.upto = offset
        self._take_in()
        return True

    @property
    def gaps(self) -> int:
        """How many runs of ours wait above a gap (0: the proof is as far as our acks go)."""
        return len(self._ahead)

    def _take_in(self) -> None:
        while self._ahead and self._ahead[0][0] <= self.upto:
            self.upto = max(self.upto, self._ahead.pop(0)[1])
