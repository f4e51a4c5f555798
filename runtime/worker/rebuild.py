"""Taking a partition: claim an epoch, then rebuild the state of its non-terminal runs.

Order (tested in tests/unit/test_worker_recovery.py):
1. Append ``EpochClaimed`` to events partition p and wait for its offset C: from here on any
   record of an earlier owner is fenced (see runtime.log.records.fencing).
2. Read the partition's latest ``PartitionCheckpoint`` from the compacted checkpoints topic.
   It lists the first offset of every run that was active at its ``covered_offset``; the same
   read finds the runs' ``HistorySnapshot`` records (runtime.worker.snapshots).
3. A listed run with a usable snapshot starts from the snapshot's records, and its own records
   are read from the snapshot's ``through_offset`` (from ``covered_offset`` when the checkpoint
   vouches for the snapshot); another listed run is read from its first offset.
4. Read events p from min(those offsets, covered_offset) to C. Below covered_offset only the
   records of the listed runs from their offsets are decoded (the key filter skips the rest
   unread); from covered_offset on, everything is. Cost: the active runs' history plus what was
   written since the checkpoint -- not everything the partition ever held, even when a run has
   waited for days (its snapshot stands in for its records).
5. Group the admitted events by run; runs without a terminal event are replayed -- except the
   runs the checkpoint lists as waiting (``waiting_runs``: only on signals or timers, at its
   covered offset) that have no record at or after it and exactly the records it counted: their
   records are kept as read (framed, the chain followed) but neither decoded nor replayed, and
   they are indexed as evicted (runtime.worker.run_cache), woken when something reaches them. Any
   other outcome (a record after the checkpoint, a count that differs, as a fenced record would
   make it) decodes them, fenced as in the log's order, and replays them as any run.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from runtime.config import Settings
from runtime.log.port.protocol import EventLog, LogRecord
from runtime.log.records.chain import Chain, chain_key_of
from runtime.log.records.events import (
    TERMINAL_TYPES,
    CheckpointSnapshots,
    Command,
    EpochClaimed,
    Event,
    HistorySnapshot,
    PartitionCheckpoint,
    Record,
    RunContinuedAsNew,
    RunRejected,
    RunStarted,
)
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import (
    ClaimCheck,
    claim_signature,
    partition_verify_key,
    value_forged,
)
from runtime.log.records.payloads import PayloadMissing, inlined, is_outlined, read_back
from runtime.log.records.run_index import RUN_KEY_PREFIX
from runtime.log.records.signing import signing_key_of
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.children import follow_ups
from runtime.worker.run_cache import listed_timers
from runtime.worker.snapshots import (
    SNAPSHOT_KEY_PREFIX,
    SnapshotUnusable,
    decoded_events,
    newer,
    reading_starts,
    usable,
    vouched_key,
)

logger = logging.getLogger("agentlog.rebuild")

CHECKPOINT_KEY_PREFIX = b"checkpoint/"


def checkpoint_key(partition: int) -> bytes:
    return CHECKPOINT_KEY_PREFIX + str(partition).encode()


@dataclass
class RebuiltPartition:
    partition: int
    epoch: int
    commands_offset: int
    active: dict[str, list[Event]]  # run id -> its admitted events, in order
    first_offsets: dict[str, int]  # run id -> offset of its first event
    known_runs: set[str]  # every run id this partition has seen (idempotent submit)
    sizes: dict[str, list[int]] = field(default_factory=dict)  # run id -> [events, bytes] so far
    records_read: int = 0
    records_decoded: int = 0
    fenced: int = 0
    checkpoint: PartitionCheckpoint | None = None
    undecodable: list[int] = field(default_factory=list)
    unloadable: dict[str, str] = field(default_factory=dict)  # run id -> why it cannot be replayed
    # Runs read that continued as new: their successors are submitted again (idempotent).
    to_continue: dict[str, tuple[RunContinuedAsNew, str]] = field(default_factory=dict)
    continued_child_of: dict[str, str] = field(default_factory=dict)  # those of them that are child runs
    # Runs read that ended with a child's ending or children to cancel to send (runtime.worker.children).
    to_follow_up: dict[str, list[Command]] = field(default_factory=dict)
    records: dict[str, list[bytes]] = field(default_factory=dict)  # active run -> its framed records
    snapshots: dict[str, tuple[int, int]] = field(default_factory=dict)  # run -> (through, count) used
    chain_tips: dict[str, bytes] = field(default_factory=dict)  # active run -> its last record's link
    # Runs indexed without replay (step 5): run -> (position, fire_at) of the timers it waits for;
    # their framed records are in ``records``, their first offsets and sizes beside the others'.
    waiting: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # Where commands resume (runtime.worker.admission): the checkpoint's commit point, the offsets at
    # or after it handled already (the checkpoint's list and the events' command offsets), and
    # run -> the offset of the submission that started it there. ``commands_offset`` is the highest.
    commands_from: int = 0
    commands_handled: set[int] = field(default_factory=set)
    started_by: dict[str, int] = field(default_factory=dict)
    # Runs not resumed (ended, or never started here) with a record that breaks their chain after
    # their end: run -> the first such record. Named, not replayed (runtime.worker.foreign).
    forged_ended: dict[str, str] = field(default_factory=dict)
    # Partition records no worker signed (runtime.log.records.partition_signing), read with the
    # workers' public key: a claim that fenced nothing, a checkpoint or snapshot not trusted. Named.
    forged_partition_records: list[str] = field(default_factory=list)


def claim(
    settings: Settings,
    serde: Serde,
    log: EventLog,
    partition: int,
    worker: str,
    signed: dict[int, bytes] | None = None,
) -> Future[int]:
    """Append the EpochClaimed record (signed with the workers' key: runtime.log.records.partition_signing;
    its signature noted in ``signed``); its offset (the future's result) is the new epoch."""
    claim_record = EpochClaimed(run_id="", partition=partition, worker=worker, occurred_at=_now_ms())
    signer = signing_key_of(settings.signing_key.get_secret_value())
    if signer is not None:
        claim_record = replace(claim_record, signature=claim_signature(signer, claim_record))
        if signed is not None:
            signed[partition] = claim_record.signature
    return log.append(settings.events_topic, partition, None, serde.encode(claim_record))


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CheckpointRead:
    """What the checkpoints topic holds for one partition."""

    checkpoint: PartitionCheckpoint | None  # the one with the highest covered offset
    known_runs: set[str]  # the run index
    snapshots: dict[str, HistorySnapshot]  # run id -> its snapshot with the highest through offset
    vouch: CheckpointSnapshots | None  # the one with the highest covered offset
    forged: list[str] = field(default_factory=list)  # records no worker signed, named (not trusted)

    def vouched(self) -> dict[str, int]:
        """Run -> through offset of the snapshots the checkpoint vouches for."""
        if self.checkpoint is None or self.vouch is None:
            return {}
        return (
            dict(self.vouch.snapshot_through)
            if self.vouch.covered_offset == self.checkpoint.covered_offset
            else {}
        )


def latest_checkpoint(settings: Settings, serde: Serde, log: EventLog, partition: int) -> CheckpointRead:
    """The checkpoint with the highest covered offset, the run ids indexed and the run snapshots."""
    return latest_checkpoints(settings, serde, log, [partition])[partition]


def latest_checkpoints(
    settings: Settings, serde: Serde, log: EventLog, partitions: list[int]
) -> dict[int, CheckpointRead]:
    """``latest_checkpoint`` of each of ``partitions``, read together."""
    key = partition_verify_key(settings.signing_key.get_secret_value(), settings.verify_key)
    where = settings.checkpoints_topic
    reads = {partition: _CheckpointReader(partition, key, where) for partition in partitions}
    ranges = dict.fromkeys(partitions, (None, None))
    for partition, record in log.read_partitions(settings.checkpoints_topic, ranges):
        reads[partition].admit(record, serde)
    return {partition: reader.result() for partition, reader in reads.items()}


_CANDIDATES = 8  # with the workers' key: the newest checkpoints kept, in case the newest are forged


class _CheckpointReader:
    """Folds one partition's checkpoint records into a CheckpointRead, record by record.

    With the workers' public key (runtime.log.records.partition_signing) signatures are checked at
    the end, on what would be used -- the newest checkpoint and vouch, each run's newest snapshot --
    not on every record an uncompacted topic holds: one verification each, unless forged. A forged
    one is named and the next newest taken (of the last ``_CANDIDATES``); a forged snapshot leaves
    its run to be read from the history."""

    def __init__(self, partition: int, key: Ed25519PublicKey | None = None, topic: str = "") -> None:
        self.partition = partition
        self.key = key  # the workers' public key: a record it does not verify is not trusted
        self.topic = topic
        self.forged: list[str] = []
        self.checkpoint_key = checkpoint_key(partition)
        self.vouched_key = vouched_key(partition)
        self.runs: set[str] = set()
        self.snapshots: dict[str, HistorySnapshot] = {}
        self.snapshot_records: dict[str, LogRecord] = {}  # run -> the record of its snapshot kept
        # (covered offset, decoded, record), newest last: a plain reader keeps the newest alone
        self.checkpoints: list[tuple[int, PartitionCheckpoint, LogRecord]] = []
        self.vouches: list[tuple[int, CheckpointSnapshots, LogRecord]] = []

    def admit(self, record: LogRecord, serde: Serde) -> None:
        if record.key is None:
            return
        if record.key.startswith(SNAPSHOT_KEY_PREFIX):
            run_id = record.key[len(SNAPSHOT_KEY_PREFIX) :].decode("utf-8", "replace")
            before = self.snapshots.get(run_id)
            newer(self.snapshots, record.key, record.value, serde)
            after = self.snapshots.get(run_id)
            if after is None:
                self.snapshot_records.pop(run_id, None)
            elif after is not before and self.key is not None:
                self.snapshot_records[run_id] = record  # checked in result(), if still the newest
            return
        if record.value is None:
            return
        if record.key.startswith(RUN_KEY_PREFIX):
            self.runs.add(record.key[len(RUN_KEY_PREFIX) :].decode())
        elif record.key == self.checkpoint_key:
            decoded = serde.decode(record.value)
            if isinstance(decoded, PartitionCheckpoint) and (
                not self.checkpoints or decoded.covered_offset > self.checkpoints[-1][0]
            ):
                self._keep(self.checkpoints, (decoded.covered_offset, decoded, record))
        elif record.key == self.vouched_key:
            found = serde.decode(record.value)
            if isinstance(found, CheckpointSnapshots) and (
                not self.vouches or found.covered_offset >= self.vouches[-1][0]
            ):
                self._keep(self.vouches, (found.covered_offset, found, record))

    def _keep(self, kept: list[Any], candidate: Any) -> None:
        kept.append(candidate)
        del kept[: -(_CANDIDATES if self.key is not None else 1)]

    def _forged(self, record: LogRecord, kind: type[Record]) -> bool:
        """With the workers' public key: True (and named) if ``record`` is not one a worker signed."""
        if self.key is None or record.value is None or record.key is None:
            return False
        why = value_forged(self.key, record.key, kind, record.value)
        if why is not None:
            where = f"{self.topic}[{self.partition}]@{record.offset} ({kind.__name__})"
            self.forged.append(f"{where}: {why}; not trusted, the rebuild reads the history instead")
        return why is not None

    def result(self) -> CheckpointRead:
        best = next(
            (c for _, c, r in reversed(self.checkpoints) if not self._forged(r, PartitionCheckpoint)), None
        )
        vouch = next(
            (v for _, v, r in reversed(self.vouches) if not self._forged(r, CheckpointSnapshots)), None
        )
        for run_id, record in self.snapshot_records.items():
            if run_id in self.snapshots and self._forged(record, HistorySnapshot):
                del self.snapshots[run_id]  # its run is read from its first offset
        return CheckpointRead(best, self.runs, self.snapshots, vouch, self.forged)


def rebuild(settings: Settings, serde: Serde, log: EventLog, partition: int, epoch: int) -> RebuiltPartition:
    """The state of ``partition`` as of ``epoch`` (the offset of our claim, already appended)."""
    return rebuild_partitions(settings, serde, log, {partition: epoch})[partition]


def rebuild_partitions(
    settings: Settings, serde: Serde, log: EventLog, epochs: dict[int, int]
) -> dict[int, RebuiltPartition]:
    """``rebuild`` of each partition (-> its epoch), their checkpoints and then their events read
    together: a worker given twelve partitions waits for two rounds of reads, not twenty-four."""
    reads = latest_checkpoints(settings, serde, log, list(epochs))
    rebuilds = {
        partition: _PartitionRebuild(settings, serde, log, partition, epoch, reads[partition])
        for partition, epoch in epochs.items()
    }
    ranges = {partition: (rebuilt.start, rebuilt.result.epoch) for partition, rebuilt in rebuilds.items()}
    for partition, record in log.read_partitions(settings.events_topic, ranges):
        rebuilds[partition].admit(record)
    return {partition: rebuilt.finish() for partition, rebuilt in rebuilds.items()}


class _PartitionRebuild:
    """Folds one partition's events, from the checkpoint's reading start to the epoch, into a
    RebuiltPartition (steps 3-5 of the module's order)."""

    def __init__(
        self,
        settings: Settings,
        serde: Serde,
        log: EventLog,
        partition: int,
        epoch: int,
        read: CheckpointRead,
    ) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        checkpoint = read.checkpoint
        listed = dict(checkpoint.active_runs) if checkpoint else {}
        self.covered = checkpoint.covered_offset if checkpoint else 0
        # Runs the checkpoint lists as waiting: their records below it are held undecoded (step 5),
        # their snapshots' too.
        listed_waiting = checkpoint.waiting_runs if checkpoint else {}
        self.waiting = {run: count for run, count in listed_waiting.items() if run in listed and count}
        loaded = usable(read.snapshots, listed, serde, undecoded=self.waiting)
        starts = reading_starts(listed, read.vouched(), self.covered, loaded)
        self.start = min([self.covered, *starts.values()]) if checkpoint else None
        self.start_of_key = {run.encode(): offset for run, offset in starts.items()}
        self.result = result = RebuiltPartition(
            partition,
            epoch,
            checkpoint.commands_offset if checkpoint else 0,
            {},
            {},
            set(read.known_runs),
            checkpoint=checkpoint,
        )
        if checkpoint is not None:
            result.commands_from = checkpoint.commands_offset
            result.commands_handled.update(checkpoint.commands_handled)
        # With the workers' public key, a claim no worker signed fences nothing (named in finish()).
        key = partition_verify_key(settings.signing_key.get_secret_value(), settings.verify_key)
        self.fence = FenceFilter(claims=None if key is None else ClaimCheck(key, partition))
        result.forged_partition_records.extend(read.forged)
        self.undecodable_runs: dict[str, str] = {}  # run id -> why
        self.events_by_run: dict[str, list[Event]] = defaultdict(list)
        self.records_by_run: dict[str, list[bytes]] = defaultdict(list)
        self.through: dict[str, int] = {}  # run -> below this offset, its records come from its snapshot
        self.terminal: set[str] = set()
        # With a chain key, each run's records must extend its chain (runtime.log.records.chain):
        # a forged one is not replayed, and its run is parked with the reason.
        self.chain_key = chain_key_of(settings.chain_key.get_secret_value())
        self.chains: dict[str, Chain] = {}
        self.forged: dict[str, str] = {}  # run id -> the first record that broke its chain
        self.timers = listed_timers(checkpoint.waiting_timers) if checkpoint else {}
        self.deferred_keys = {run.encode(): run for run in self.waiting}
        # run -> (offset, the fence's watermark there, framed value) of each record held
        self.deferred: dict[str, list[tuple[int, int, bytes]]] = {run: [] for run in self.waiting}
        # Snapshots of listed waiting runs, not decoded: decoded only if the run is replayed after all.
        self.undecoded_snapshots: dict[str, HistorySnapshot] = {}
        for run_id, snapshot in loaded.items():
            if snapshot.events is None:
                self.undecoded_snapshots[run_id] = snapshot.snapshot
            self.events_by_run[run_id] = list(snapshot.events or ())
            self.records_by_run[run_id] = list(snapshot.snapshot.records)
            result.first_offsets[run_id] = snapshot.snapshot.first_offset
            count = len(snapshot.snapshot.records)
            result.sizes[run_id] = [count, sum(len(r) for r in snapshot.snapshot.records)]
            result.snapshots[run_id] = (snapshot.snapshot.through_offset, count)
            result.known_runs.add(run_id)
            self.through[run_id] = snapshot.snapshot.through_offset
            if self.chain_key is not None:
                for index, value in enumerate(snapshot.snapshot.records):
                    self._follow(run_id, value, f"record {index + 1} of its HistorySnapshot")

    def _follow(self, run_id: str, value: bytes, where: str) -> bool:
        """True if ``value`` extends the run's chain; else the run is noted as forged (its first break)."""
        assert self.chain_key is not None
        chain = self.chains.get(run_id)
        if chain is None:
            chain = self.chains[run_id] = Chain(self.chain_key, run_id)
        found = chain.admit(value)
        if found is None:
            return True
        self.forged.setdefault(run_id, f"its chain is broken at {found.describe(where)}; not replayed")
        return False

    def admit(self, record: LogRecord) -> None:
        result = self.result
        result.records_read += 1
        if record.value is None:
            return
        if (
            record.offset < self.covered
            and record.key is not None
            and record.offset < self.start_of_key.get(record.key, self.covered)
        ):
            return  # a run that had ended by the checkpoint, or records its snapshot holds: not decoded
        key = record.key
        if key is not None and key in self.deferred_keys:
            run_id = self.deferred_keys[key]
            if record.offset < self.covered:
                if record.offset >= self.through.get(run_id, -1):  # else its snapshot holds it
                    self.deferred[run_id].append((record.offset, self.fence.watermark, record.value))
                return
            self._undefer(run_id)  # it has work after the checkpoint: replayed as any run
        self._take(key, record.offset, record.value)

    def _undefer(self, run_id: str, follow: bool = True) -> None:
        """Decode the records held for a listed waiting run, in their order, fenced by the
        watermark each was read under (and the run's own epochs before it)."""
        del self.deferred_keys[run_id.encode()]
        snapshot = self.undecoded_snapshots.pop(run_id, None)
        if snapshot is not None:
            try:
                self.events_by_run[run_id] = decoded_events(run_id, snapshot, self.serde)
            except SnapshotUnusable as why:  # its digest held, a record does not decode: not replayable
                logger.error("run %s: its HistorySnapshot is unusable (%s)", run_id, why)
                self.undecodable_runs.setdefault(run_id, f"its HistorySnapshot is unusable: {why}")
        floor = -1
        for offset, watermark, value in self.deferred.pop(run_id):
            floor = max(floor, watermark)
            epoch = self._take(run_id.encode(), offset, value, floor, follow)
            if epoch is not None:
                floor = max(floor, epoch)

    def _take(
        self, key: bytes | None, offset: int, value: bytes, floor: int | None = None, follow: bool = True
    ) -> int | None:
        """Decode and admit one record (``floor``: a held record's fence watermark; None: the
        partition's fence, in read order); the epoch of an admitted event, else None."""
        result = self.result
        try:
            event = self.serde.decode(value, key)
        except DecodeError as error:
            # A run missing one of its events cannot be replayed faithfully: it is parked with the
            # reason (below) rather than resumed without it.
            logger.error("partition %s offset %s: %s", result.partition, offset, error)
            result.undecodable.append(offset)
            if key is not None:
                where = f"{self.settings.events_topic}[{result.partition}]@{offset}"
                self.undecodable_runs.setdefault(
                    key.decode("utf-8", "replace"), f"its event at {where} cannot be decoded: {error}"
                )
            return None
        result.records_decoded += 1
        if not isinstance(event, Event):
            return None
        if floor is None:
            if not self.fence.admit(event, offset):
                return None
        elif event.epoch < floor:  # a held record a zombie wrote (runtime.log.records.fencing)
            self.fence.fenced_count += 1
            return None
        if isinstance(event, (EpochClaimed, PartitionCheckpoint)):
            return None
        run_id = event.run_id
        result.known_runs.add(run_id)
        if (
            self.chain_key is not None
            and follow
            and offset >= self.through.get(run_id, -1)
            and not self._follow(
                run_id, value, f"{self.settings.events_topic}[{result.partition}]@{offset} ({event.type})"
            )
        ):
            return None  # a forged record neither ends the run nor joins its history
        offset_of_command = getattr(event, "command_offset", None)
        if isinstance(offset_of_command, int):
            result.commands_offset = max(result.commands_offset, offset_of_command + 1)
            if offset_of_command >= result.commands_from:
                result.commands_handled.add(offset_of_command)
                if isinstance(event, RunStarted):
                    result.started_by[run_id] = offset_of_command
        if isinstance(event, RunRejected):
            self.terminal.add(run_id)
            return None
        if offset < self.through.get(run_id, -1):
            return None  # held by the run's snapshot (one newer than the checkpoint)
        if run_id not in result.first_offsets:
            result.first_offsets[run_id] = offset
        size = result.sizes.setdefault(run_id, [0, 0])
        size[0] += 1
        size[1] += len(value)
        self.events_by_run[run_id].append(event)
        self.records_by_run[run_id].append(value)
        if isinstance(event, TERMINAL_TYPES):
            self.terminal.add(run_id)
            if sent := follow_ups(self.events_by_run[run_id], event):  # sent again: harmless repeats
                result.to_follow_up[run_id] = sent
        if isinstance(event, RunContinuedAsNew):
            first = self.events_by_run[run_id][0]
            if isinstance(first, RunStarted):
                result.to_continue[run_id] = (event, first.workflow)
                if first.child_of:  # a child's successor is its parent's child too
                    result.continued_child_of[run_id] = first.child_of
            else:
                logger.error("run %s continued as new, but its RunStarted was not read", run_id)
        if run_id in self.terminal:  # an ended run is not replayed: its records need not be kept
            del self.events_by_run[run_id], self.records_by_run[run_id]
            self.chains.pop(run_id, None)
        return event.epoch

    def finish(self) -> RebuiltPartition:
        result = self.result
        for run_id in list(self.deferred):
            self._index_waiting(run_id)
        result.fenced = self.fence.fenced_count
        result.forged_partition_records.extend(
            f"{self.settings.events_topic}[{result.partition}]@{offset} (EpochClaimed): {why}; it fences nothing"
            for offset, why in self.fence.forged
        )
        for run_id, why in self.forged.items():
            if run_id in self.terminal or not self.events_by_run.get(run_id):
                result.forged_ended[run_id] = why
        for run_id, logged in self.events_by_run.items():
            if run_id in self.terminal or not logged or not isinstance(logged[0], RunStarted):
                continue
            result.active[run_id] = logged
            result.records[run_id] = self.records_by_run[run_id]
            if run_id in self.chains:
                result.chain_tips[run_id] = self.chains[run_id].tip
            if run_id in self.forged:
                result.unloadable[run_id] = self.forged[run_id]
            elif run_id in self.undecodable_runs:
                result.unloadable[run_id] = self.undecodable_runs[run_id]
            elif any(is_outlined(e) for e in logged):  # replay hands the workflow the stored results
                try:
                    stored = read_back(
                        self.log, self.settings.payloads_topic, result.partition, logged, self.serde.sealer
                    )
                    result.active[run_id] = inlined(logged, stored)
                except PayloadMissing as error:
                    result.unloadable[run_id] = str(error)
        return result

    def _index_waiting(self, run_id: str) -> None:
        """A listed waiting run with no record after the checkpoint: indexed without replay if it
        has the records the checkpoint counted (and they extend its chain); else replayed."""
        held = self.deferred[run_id]
        from_snapshot = self.records_by_run.get(run_id, [])
        records = [*from_snapshot, *(value for _, _, value in held)]
        if not records or len(records) != self.waiting[run_id]:
            self._undefer(run_id)
            return
        if self.chain_key is not None:
            where = f"{self.settings.events_topic}[{self.result.partition}]"
            if not all(self._follow(run_id, value, f"{where}@{offset}") for offset, _, value in held):
                self._undefer(run_id, follow=False)  # forged: decoded, then parked with the reason
                return
        del self.deferred[run_id], self.deferred_keys[run_id.encode()]
        self.undecoded_snapshots.pop(run_id, None)
        self.events_by_run.pop(run_id, None)  # a snapshot's events: not replayed
        self.records_by_run.pop(run_id, None)
        result = self.result
        result.known_runs.add(run_id)
        if held:
            result.first_offsets.setdefault(run_id, held[0][0])
        size = result.sizes.setdefault(run_id, [0, 0])
        size[0] += len(held)
        size[1] += sum(len(value) for _, _, value in held)
        result.records[run_id] = records
        result.waiting[run_id] = self.timers.get(run_id, ())
        if run_id in self.chains:
            result.chain_tips[run_id] = self.chains[run_id].tip
