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

from runtime import stagemarks
from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.records.chain import LINK_SIZE, START, chain_key_of, seal
from runtime.log.records.events import TERMINAL_TYPES, Event, RunRejected, RunStarted
from runtime.log.records.run_index import SEEN, run_key
from runtime.log.records.signing import SIGNED_TYPES, sign, signing_key_of
from runtime.log.schemas.serde import Serde
from runtime.worker.partition import OwnedPartition

# The records the batch notes beside queueing them: a run's start (its offset, the run index) and
# its endings (the checkpoint's run index).
_NOTED: frozenset[type[Event]] = frozenset({RunStarted, RunRejected, *TERMINAL_TYPES})


class TurnBatcher:
    """Queues encoded events per partition; sends each partition's queue once per loop turn."""

    def __init__(self, settings: Settings, serde: Serde, log: EventLog) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self._dirty: list[OwnedPartition] = []  # partitions with records queued this turn
        # The chain key (runtime.log.records.chain); empty: records are written unchained.
        self.chain_key = chain_key_of(settings.chain_key.get_secret_value())
        # The workers' signing key (runtime.log.records.signing): the records that set a run's
        # status are signed before they are sealed; empty: written unsigned.
        self.signing_key = signing_key_of(settings.signing_key.get_secret_value())
        # Partition -> the links this worker sealed there, until its foreign-record watch reads
        # them back (runtime.worker.foreign): a record read there with another link is not ours.
        self.written: dict[int, set[bytes]] | None = None

    def append(self, owned: OwnedPartition, events: list[Event]) -> asyncio.Future[int] | None:
        """Queue ``events``; the future resolves with the offset of the last record queued for the
        partition in this turn, once acknowledged."""
        if not events:
            return None
        pending = owned.pending
        key, signer = self.chain_key, self.signing_key
        tips = owned.chain_tips
        written = None if self.written is None else self.written.setdefault(owned.partition, set())
        encode, sizes, kept = self.serde.encode, owned.sizes, owned.records
        for event in events:
            value = encode(event)
            run_id = event.run_id
            if signer is not None and run_id and event.type in SIGNED_TYPES:
                value = sign(signer, run_id.encode(), tips.get(run_id, START), value)
            if key is not None and run_id:
                value = seal(key, run_id.encode(), tips.get(run_id, START), value)
                tips[run_id] = link = value[-LINK_SIZE:]
                if written is not None:
                    written.add(link)
            kind = type(event)
            if kind in _NOTED:  # a run's first or last record (no record type is subclassed)
                if kind is RunStarted:
                    owned.pending_started[len(pending)] = run_id
                if kind is RunStarted or kind is RunRejected:
                    owned.known_runs.add(run_id)
                    owned.pending_runs.append(run_id)
                else:
                    owned.pending_ended[len(pending)] = (run_id, owned.first_offset_of(run_id))
            pending.append((run_id.encode() if run_id else None, value))
            size = sizes.get(run_id)
            if size is not None:  # a live run's record
                size[0] += 1
                size[1] += len(value)
                records = kept.get(run_id)
                if records is None:
                    kept[run_id] = [value]
                else:
                    records.append(value)
        future = owned.pending_last
        if future is None:
            loop = asyncio.get_running_loop()
            future = owned.pending_last = loop.create_future()
            if not self._dirty:
                loop.call_soon(self.send)
            self._dirty.append(owned)
        owned.last_write = future
        owned.writes_since_checkpoint += len(events)
        if stagemarks.ON:
            _mark_appended(events, future)
        return future

    def send(self) -> None:
        """End of the loop turn: one batch per partition with queued records."""
        dirty, self._dirty = self._dirty, []
        loop = asyncio.get_running_loop()
        for owned in dirty:
            send_partition(self.settings, self.log, loop, owned)


def send_partition(
    settings: Settings, log: EventLog, loop: asyncio.AbstractEventLoop, owned: OwnedPartition
) -> None:
    """Send the records queued for ``owned`` as one batch. The turn's end does; so does a checkpoint,
    ahead of it, to know that no record is queued behind the last one sent."""
    records, started, ended, last, runs = (
        owned.pending,
        owned.pending_started,
        owned.pending_ended,
        owned.pending_last,
        owned.pending_runs,
    )
    if last is None:  # sent already in this turn
        return
    owned.pending, owned.pending_started, owned.pending_ended, owned.pending_last, owned.pending_runs = (
        [],
        {},
        {},
        None,
        [],
    )
    if owned.lost:  # its successor fences these anyway; nobody waits for them
        last.cancel()
        return
    watched = {len(records) - 1: last}
    for index, run_id in started.items():  # a RunStarted's offset starts its run's rebuild
        ack = watched.get(index) or watched.setdefault(index, loop.create_future())
        owned.started_acks[run_id] = ack
        ack.add_done_callback(functools.partial(owned.note_first_offset, run_id))
    for index, (run_id, first) in ended.items():  # its offset goes to the run index (checkpoint)
        ack = watched.get(index) or watched.setdefault(index, loop.create_future())
        owned.note_ending(run_id, first, ack)
    if runs:
        last.add_done_callback(functools.partial(_index_runs, settings, log, owned.partition, runs))
    if stagemarks.ON:
        stagemarks.mark("sent", records[-1][0])
    log.append_batch(loop, settings.events_topic, owned.partition, records, watched)


def _mark_appended(events: list[Event], durable: asyncio.Future[int]) -> None:
    """Stage marks (runtime.stagemarks) of the records queued now, and of a run's ending's ack."""
    for event in events:
        stagemarks.mark(f"append {type(event).__name__}", event.run_id, getattr(event, "position", -1))
        if isinstance(event, TERMINAL_TYPES):
            durable.add_done_callback(functools.partial(_mark_end_acked, event.run_id))


def _mark_end_acked(run_id: str, _acked: asyncio.Future[int]) -> None:
    stagemarks.mark("end acked", run_id)


def _index_runs(
    settings: Settings, log: EventLog, partition: int, runs: list[str], acked: asyncio.Future[int]
) -> None:
    """The run index (idempotent submission after a rebuild), written once the runs' first records
    are acknowledged: an index entry whose RunStarted was lost with a killed worker would make its
    successor ignore the resubmitted command as a duplicate, and the run would never start. Before
    the checkpoint that covers the batch (that checkpoint waits for the same ack, and this callback
    was added first), so a covered run is always indexed."""
    if acked.cancelled() or acked.exception() is not None:
        return  # not durable: the worker stops on it, and its successor handles the command again
    for run_id in runs:
        log.append_unwatched(settings.checkpoints_topic, partition, run_key(run_id), SEEN)
