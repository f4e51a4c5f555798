"""Records the owner did not write: a partition's owner notices each one and parks its run.

The owner of an events partition is its only writer from its claim on (a fenced zombie writes
there too, with an older epoch, and every reader leaves those out). A record that is neither --
written with stolen credentials, which the broker's ACLs cannot refuse -- is noticed here: the
ownership tail (``OwnershipCheck.notice_foreign``) reads the owned partitions behind the
worker's writer, at least once a second (on Kafka, not the records its own acks already proved
ours: a foreign record among them is a gap in those acks, read), and hands each keyed one to :meth:`check`,
which looks its chain link up among the links this worker sealed there (``TurnBatcher.written``;
one set lookup a record, on the tail's thread). A link the worker did not seal is foreign; on the
loop (:meth:`found`) its run is parked with the reason -- woken first if it was evicted -- and
its real work goes no further: the forged record is never read into the run (the owner's history
is its own), and no record is appended after the RunParked. A foreign record of a run that has
ended, or of a run this partition does not hold, is named (its run cannot be parked: nothing of
it runs). Each is one log line and one count of ``agentlog_foreign_records``.

Needs the chain key: without it the worker's records carry no link to recognise them by, and
nothing is checked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from runtime.log.records.chain import link_of
from runtime.log.records.events import Event
from runtime.log.schemas.datum import DecodeError
from runtime.worker.execution import Executor
from runtime.worker.partition import OwnedPartition
from runtime.workflow.activation import Park

log = logging.getLogger("agentlog.worker")


class ForeignRecords:
    """Recognises this worker's records in its partitions; parks the run of any other."""

    def __init__(self, executor: Executor, owned: Callable[[int], OwnedPartition | None]) -> None:
        self.executor = executor
        self.owned = owned
        self.topic = executor.settings.events_topic
        self.written: dict[int, set[bytes]] = {}
        executor.batcher.written = self.written  # the batcher notes each link it seals

    def check(self, partition: int, value: bytes) -> bool:
        """On the ownership tail's thread: True if ``value`` is not a record this worker sealed."""
        link = link_of(value)
        mine = self.written.get(partition)
        if link is None or mine is None or link not in mine:
            return True
        mine.discard(link)  # read back once: the set holds only what the tail has not met yet
        return False

    def forget(self, partition: int) -> None:
        """The partition was lost or taken again: what was sealed there no longer matters."""
        self.written.pop(partition, None)

    def found(self, records: list[tuple[int, int, bytes, bytes]]) -> None:
        """On the loop: each foreign (partition, offset, key, value) named, and its run parked."""
        for partition, offset, key, value in records:
            owned = self.owned(partition)
            if owned is None or owned.lost:
                continue
            try:
                decoded = self.executor.batcher.serde.decode(value, key)
            except DecodeError:
                decoded = None
            event = decoded if isinstance(decoded, Event) else None
            if event is not None and event.epoch < owned.epoch:
                continue  # a fenced zombie's: no reader takes it into a run
            kind = event.type if event is not None else "undecodable"
            run_id = key.decode("utf-8", "replace")
            where = f"{self.topic}[{partition}]@{offset} ({kind})"
            action = self._park(owned, run_id, where)
            self.executor.metrics.foreign_records[action] = (
                self.executor.metrics.foreign_records.get(action, 0) + 1
            )
            log.error(
                json.dumps({"event": "foreign_record", "run": run_id, "record": where, "action": action})
            )

    def _park(self, owned: OwnedPartition, run_id: str, where: str) -> str:
        """Park the live run ``run_id`` with the reason; what was done (the metric's label)."""
        if not owned.is_live(run_id):
            return "named" if run_id in owned.known_runs else "named_unknown_run"
        run = self.executor.runs.run(owned, run_id)  # woken first if it was evicted
        if run is None or not run.view.active:
            return "named"
        reason = (
            f"a record no worker wrote is in its history: {where}; the run's real work stops here "
            "(an operator checks the log: `agentlog audit verify`, then `agentlog reset`)"
        )
        parked = run.activate(Park(reason))
        self.executor.flush(owned, run, parked)
        return "parked"
