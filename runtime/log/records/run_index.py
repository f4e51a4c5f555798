"""The run index: key ``run/<id>`` of the compacted checkpoints topic, on the run's partition.

An entry's presence means "this partition has seen the run" (idempotent submission after a
rebuild: every reader accepts any value). Its value says where the run's records lie, as far as
its writer has proved:

- ``b"1"``: seen, nothing located (written at the ack of the run's first record, and by older
  code);
- ``b"@F"``: the run's RunStarted is at offset F of its events partition;
- ``b"@F:X"``: and its ending event is at offset X.

Offsets are written only by the owner, after the checkpoint's ownership proof that no newer claim
precedes them (runtime.worker.checkpoint): a record at such an offset is never fenced, so a read
may start at F (runtime.log.records.fencing). A reader still checks that the record it finds there is
the run's RunStarted (or ending event) and scans the partition when it is not.
"""

from __future__ import annotations

from dataclasses import dataclass

RUN_KEY_PREFIX = b"run/"
SEEN = b"1"


def run_key(run_id: str) -> bytes:
    return RUN_KEY_PREFIX + run_id.encode()


@dataclass(frozen=True)
class RunLocation:
    """Where a run's records lie in its events partition."""

    first: int  # offset of its RunStarted
    end: int | None = None  # offset of its ending event, once it has ended

    def encode(self) -> bytes:
        return b"@%d" % self.first if self.end is None else b"@%d:%d" % (self.first, self.end)


def parse_location(value: bytes) -> RunLocation | None:
    """The location an index value carries; None for ``b"1"`` or any value not of this form."""
    if not value.startswith(b"@"):
        return None
    first, _, end = value[1:].partition(b":")
    try:
        return RunLocation(int(first), int(end) if end else None)
    except ValueError:
        return None
