"""Epoch fencing: which records of an events partition are part of the log.

agentlog does not pay a Kafka transaction per recorded result: a commit round trip per step
would dominate the latency of a run made of many short steps, and its tail more so. Instead a worker that takes a partition first appends an
``EpochClaimed`` record; the claim's *offset* is the new epoch, so epochs grow with the log
without anyone having to know the previous one. Every event carries its writer's epoch.

Rule, applied by every reader (replay, ``history``, the ClickHouse sink): reading a partition
in offset order, keep a watermark = the highest epoch seen (claims raise it to their own
offset; valid events carry it). An event whose epoch is below the watermark was written by a
worker that had already lost the partition -- a fenced zombie -- and is not part of any run.

Reading may start mid-partition only at an offset known to hold a valid event (a run's first
event, or a checkpoint's covered offset); that event's epoch is at least every claim before
it, so the watermark is right from there on.

A zombie is also kept from *starting* an effect: before an effecting call the writer checks
that no foreign claim precedes its ``...Scheduled`` record (see ``runtime.worker.ownership``).

With the workers' public key (``claims``: runtime.log.records.partition_signing) a claim no worker
signed is not a claim: it raises nothing, so the real owner's records after it are not read as
fenced; it is kept in ``forged`` (offset, why) for the reader to name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.log.records.events import EpochClaimed, Event
from runtime.log.records.partition_signing import ClaimCheck


@dataclass
class FenceFilter:
    """Tracks the epoch watermark of one partition; feed records in offset order."""

    watermark: int = -1
    fenced_count: int = 0
    claims: ClaimCheck | None = None
    forged: list[tuple[int, str]] = field(default_factory=list)

    def admit(self, event: Event, offset: int) -> bool:
        """True if ``event`` (read at ``offset``) is part of the log; False if it is fenced (or a
        forged claim)."""
        if isinstance(event, EpochClaimed):
            if self.claims is not None and (why := self.claims.forged(event)) is not None:
                self.forged.append((offset, why))
                return False
            self.watermark = max(self.watermark, offset)
            return True
        return self.admit_epoch(event.epoch)

    def admit_epoch(self, epoch: int) -> bool:
        """``admit`` for an event other than a claim, known by its epoch alone (a reader that
        needs nothing else of it: runtime.log.schemas.envelope)."""
        if epoch < self.watermark:
            self.fenced_count += 1
            return False
        self.watermark = epoch
        return True
