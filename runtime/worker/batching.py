"""Group commit: the appends of one event-loop turn leave as one batch per partition.

Every append of one turn (many runs' results and next calls) is queued and sent when the turn
ends: no timer, so a lone step waits no longer, and under load one delivery callback and one
loop wake-up serve dozens of records. Only the batch's last record (and a RunStarted, for its
offset) is watched: the log acknowledges a partition's records in order, so the ack of the last
vouches for the rest.
"""

from __future__ import annotations

import asyncio
import functools

from runtime.config import Settings
from runtime.log.events import Event, RunRejected, RunStarted
from runtime.log.port import EventLog
from runtime.log.serde import Serde
from runtime.worker.partition import OwnedPartition
from runtime.worker.rebuild import RUN_KEY_PREFIX


class TurnBatcher:
    """Queues encoded events per partition; sends each partition's queue once per loop turn."""

    def __init__(self, settings: Settings, serde: Serde, log: EventLog) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self._dirty: list[OwnedPartition] = []  # partitions with records queued this turn

    def append(self, owned: OwnedPartition, events: list[Event]) -> asyncio.Future[int] | None:
        """Queue ``events``; the future resolves with the offset of the last record queued for the
        partition in this turn, once acknowledged."""
        if not events:
            return None
        pending = owned.pending
        for event in events:
            value = self.serde.encode(event)
            run_id = event.run_id
            if isinstance(event, RunStarted):
                owned.pending_started[len(pending)] = run_id
            if isinstance(event, (RunStarted, RunRejected)):
                owned.known_runs.add(run_id)
                owned.pending_runs.append(run_id)
            pending.append((run_id.encode() if run_id else None, value))
            size = owned.sizes.get(run_id)
            if size is not None:
                size[0] += 1
                size[1] += len(value)
        future = owned.pending_last
        if future is None:
            loop = asyncio.get_running_loop()
            future = owned.pending_last = loop.create_future()
            if not self._dirty:
                loop.call_soon(self.send)
            self._dirty.append(owned)
        owned.last_write = future
        owned.writes_since_checkpoint += len(events)
        return future

    def send(self) -> None:
        """End of the loop turn: one batch per partition with queued records."""
        dirty, self._dirty = self._dirty, []
        loop = asyncio.get_running_loop()
        for owned in dirty:
            records, started, last, runs = (
                owned.pending,
                owned.pending_started,
                owned.pending_last,
                owned.pending_runs,
            )
            owned.pending, owned.pending_started, owned.pending_last, owned.pending_runs = [], {}, None, []
            assert last is not None
            if owned.lost:  # its successor fences these anyway; nobody waits for them
                last.cancel()
                continue
            watched = {len(records) - 1: last}
            for index, run_id in started.items():  # a RunStarted's offset starts its run's rebuild
                ack = watched.get(index) or watched.setdefault(index, loop.create_future())
                owned.started_acks[run_id] = ack
                ack.add_done_callback(functools.partial(owned.note_first_offset, run_id))
            self.log.append_batch(loop, self.settings.events_topic, owned.partition, records, watched)
            for run_id in runs:  # the run index, for idempotent submission after a rebuild
                self.log.append_unwatched(
                    self.settings.checkpoints_topic, owned.partition, RUN_KEY_PREFIX + run_id.encode(), b"1"
                )

