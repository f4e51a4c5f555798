"""History snapshots: a long-waiting run's records, so a rebuild need not re-read the partition
from the run's start.

A checkpoint lists every active run with the offset of its first record, and without snapshots a
rebuild reads the partition from the oldest of them: one run waiting a week for a signal would make
every rebuild re-read the week. So a checkpoint round also writes, for each active run that is
waiting -- it appended nothing since the previous round (a timer, a signal, a slow call) -- and
whose records start ``Settings.run_snapshot_lag`` offsets or more before the checkpoint's covered
offset, a ``HistorySnapshot``: the run's records below that offset, each exactly as framed in the events topic
(an out-of-line result stays out of line), and their sha256. It goes to the compacted checkpoints
topic under ``snapshot/<run id>``: a newer snapshot of the run replaces it, a tombstone follows the
run's end. A busy run is not snapshotted: it would be copied again at every round while it lasts,
and a rebuild reads it from its first offset, which the run's short life keeps near.

Rules (the order of a round is written in runtime.worker.checkpoint):
- A snapshot is appended only after the ack of the last record it describes and the proof that no
  newer claim precedes that record, and before the checkpoint that vouches for it: it never holds
  an unacknowledged record, nor one a newer owner's rebuild would fence.
- A snapshot holds every record of its run below ``through_offset`` and none at or above it: its
  records are counted right after the turn's queued records were sent, so the ack of
  ``through_offset - 1`` covers exactly them (a partition's records get offsets in append order).
- A checkpoint vouches for a snapshot (a ``CheckpointSnapshots`` record with the checkpoint's
  covered offset, appended just before it under ``vouched/<partition>``) only while its run has
  appended nothing since: then a rebuild reads nothing of the run below the covered offset. A run that
  appends more is no longer vouched for; its snapshot stays a valid prefix (the rebuild reads the
  run from the snapshot's ``through_offset`` on) until the run's lag calls for a new one.
- A rebuild uses a snapshot only if it belongs to the run the checkpoint lists (same first offset),
  its sha256 matches and every record decodes; otherwise it reads the run from its first offset,
  as it would without snapshots.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import CheckpointSnapshots, Event, HistorySnapshot
from runtime.log.records.partition_signing import sign_value
from runtime.log.records.signing import signing_key_of
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.partition import OwnedPartition

logger = logging.getLogger("agentlog.snapshots")

SNAPSHOT_KEY_PREFIX = b"snapshot/"
VOUCHED_KEY_PREFIX = b"vouched/"
# Kafka refuses a record over ~1 MB (message.max.bytes): a run with more recorded bytes than this
# gets no snapshot, and a rebuild reads it from its first offset.
MAX_SNAPSHOT_BYTES = 768 * 1024


def snapshot_key(run_id: str) -> bytes:
    return SNAPSHOT_KEY_PREFIX + run_id.encode()


def vouched_key(partition: int) -> bytes:
    return VOUCHED_KEY_PREFIX + str(partition).encode()


def records_digest(records: Iterable[bytes]) -> str:
    """sha256 of ``records``, each preceded by its length (4 bytes, big-endian)."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(len(record).to_bytes(4, "big"))
        digest.update(record)
    return digest.hexdigest()


def live_record_counts(owned: OwnedPartition) -> dict[str, int]:
    """Run -> how many records it has appended so far, for each live run of ``owned``."""
    return {run: len(owned.records.get(run, ())) for run in owned.live_runs()}


class SnapshotWriter:
    """Appends the history snapshots a checkpoint round calls for, and retires those of ended runs."""

    def __init__(self, settings: Settings, serde: Serde, log: EventLog, worker_id: str) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self.worker_id = worker_id
        self._too_large: set[str] = set()  # runs already reported as too large to snapshot
        self._previous: dict[int, dict[str, int]] = {}  # partition -> the record counts of its last round
        # The workers' key (runtime.log.records.partition_signing): snapshots and vouches signed.
        self.signer = signing_key_of(settings.signing_key.get_secret_value())

    def write(
        self, owned: OwnedPartition, counts: Mapping[str, int], covered: int, listed: Iterable[str]
    ) -> None:
        """For a checkpoint covering the records below ``covered`` and listing the runs ``listed``,
        ``counts`` being the live runs' record counts taken when the last of those records was
        appended: append the snapshots due, then the ``CheckpointSnapshots`` the checkpoint vouches for."""
        listed = set(listed)
        vouched = {
            run: at for run, at in self._snapshots_due(owned, counts, covered).items() if run in listed
        }
        if not vouched:
            return  # an older vouch names another covered offset: a rebuild ignores it
        vouch = CheckpointSnapshots(
            run_id="",
            occurred_at=int(time.time() * 1000),
            worker=self.worker_id,
            epoch=owned.epoch,
            partition=owned.partition,
            covered_offset=covered,
            snapshot_through=vouched,
        )
        key = vouched_key(owned.partition)
        value = sign_value(self.signer, key, CheckpointSnapshots, self.serde.encode(vouch))
        self.log.append(self.settings.checkpoints_topic, owned.partition, key, value)

    def _snapshots_due(
        self, owned: OwnedPartition, counts: Mapping[str, int], covered: int
    ) -> dict[str, int]:
        """Append the snapshots due; the runs whose latest snapshot holds all their records below
        ``covered`` -> its through offset."""
        vouched: dict[str, int] = {}
        previous, self._previous[owned.partition] = self._previous.get(owned.partition, {}), dict(counts)
        for run_id, count in counts.items():
            taken = owned.snapshots.get(run_id)
            if taken is not None and taken[1] == count:  # nothing appended since its snapshot
                vouched[run_id] = taken[0]
                continue
            first = owned.first_offsets.get(run_id)
            if first is None or count == 0 or previous.get(run_id) != count:  # unknown start, or busy
                continue
            read_from = taken[0] if taken is not None else first
            if covered - read_from < self.settings.run_snapshot_lag:
                continue
            records = owned.records.get(run_id, [])[:count]
            if len(records) != count:  # the run's state was dropped meanwhile
                continue
            if sum(len(r) for r in records) > MAX_SNAPSHOT_BYTES:
                self._report_too_large(run_id, records)
                continue
            snapshot = HistorySnapshot(
                run_id=run_id,
                occurred_at=int(time.time() * 1000),
                worker=self.worker_id,
                epoch=owned.epoch,
                partition=owned.partition,
                first_offset=first,
                through_offset=covered,
                records=records,
                sha256=records_digest(records),
            )
            # Not awaited: the checkpoint after it on the same partition is ordered behind it, and a
            # snapshot lost anyway only makes a rebuild read the run from its first offset.
            key = snapshot_key(run_id)
            value = sign_value(self.signer, key, HistorySnapshot, self.serde.encode(snapshot))
            self.log.append(self.settings.checkpoints_topic, owned.partition, key, value)
            owned.snapshots[run_id] = (covered, count)
            vouched[run_id] = covered
        return vouched

    def retire(self, owned: OwnedPartition, counts: Mapping[str, int]) -> None:
        """Tombstone the snapshots of runs that had ended before the round began (the checkpoint
        just appended no longer lists them), and drop the records kept for runs no longer live."""
        for run_id in [r for r in owned.snapshots if not owned.is_live(r) and r not in counts]:
            del owned.snapshots[run_id]
            self.log.append_unwatched(
                self.settings.checkpoints_topic, owned.partition, snapshot_key(run_id), None
            )
        for run_id in [r for r in owned.records if not owned.is_live(r) and r not in owned.sizes]:
            del owned.records[run_id]  # e.g. a run that continued as new

    def _report_too_large(self, run_id: str, records: list[bytes]) -> None:
        if run_id in self._too_large:
            return
        self._too_large.add(run_id)
        logger.warning(
            json.dumps(
                {
                    "event": "snapshot_skipped",
                    "run": run_id,
                    "why": f"{sum(len(r) for r in records)} recorded bytes exceed {MAX_SNAPSHOT_BYTES}: "
                    "a rebuild reads this run from its first offset",
                }
            )
        )


@dataclass(frozen=True)
class LoadedSnapshot:
    """A verified snapshot and its records decoded (None: not decoded, its run indexed as waiting)."""

    snapshot: HistorySnapshot
    events: list[Event] | None


def newer(found: dict[str, HistorySnapshot], key: bytes, value: bytes | None, serde: Serde) -> None:
    """Fold one record of the checkpoints topic under ``snapshot/...`` into ``found`` (run id ->
    the snapshot with the highest through offset, the later of equals; a tombstone removes the run)."""
    run_id = key[len(SNAPSHOT_KEY_PREFIX) :].decode("utf-8", "replace")
    if value is None:
        found.pop(run_id, None)
        return
    try:
        decoded = serde.decode(value, run_id.encode())
    except DecodeError as error:
        logger.error(
            "the snapshot of run %s cannot be decoded (%s): its run is read from its first offset",
            run_id,
            error,
        )
        return
    if isinstance(decoded, HistorySnapshot):
        current = found.get(run_id)
        if (
            current is None or decoded.through_offset >= current.through_offset
        ):  # a tie: the later, as compaction keeps
            found[run_id] = decoded


class SnapshotUnusable(AgentlogError):
    """A snapshot that cannot serve a rebuild; the message says why."""


def usable(
    found: Mapping[str, HistorySnapshot],
    listed: Mapping[str, int],
    serde: Serde,
    undecoded: Collection[str] = (),
) -> dict[str, LoadedSnapshot]:
    """The snapshots a rebuild may start from: of a run the checkpoint lists (same first offset),
    whose sha256 matches and whose every record decodes. The others are reported and ignored.
    The records of ``undecoded`` runs (listed as waiting: indexed, not replayed) are checked
    against the sha256 only; their events are decoded if the run turns out to need a replay
    (:func:`decoded_events`)."""
    loaded: dict[str, LoadedSnapshot] = {}
    for run_id, snapshot in found.items():
        if listed.get(run_id) != snapshot.first_offset:
            continue  # a run that ended, or a snapshot of a run the checkpoint does not know
        try:
            if run_id in undecoded:
                _check_digest(snapshot)
                loaded[run_id] = LoadedSnapshot(snapshot, None)
            else:
                loaded[run_id] = LoadedSnapshot(snapshot, decoded_events(run_id, snapshot, serde))
        except SnapshotUnusable as why:
            logger.error(
                "the snapshot of run %s through offset %s is not used (%s): the run is read from its first offset",
                run_id,
                snapshot.through_offset,
                why,
            )
    return loaded


def _check_digest(snapshot: HistorySnapshot) -> None:
    if records_digest(snapshot.records) != snapshot.sha256:
        raise SnapshotUnusable("its records do not match its sha256")


def decoded_events(run_id: str, snapshot: HistorySnapshot, serde: Serde) -> list[Event]:
    """The snapshot's records decoded (SnapshotUnusable if its digest or a record is wrong)."""
    _check_digest(snapshot)
    key = run_id.encode()
    events: list[Event] = []
    for index, data in enumerate(snapshot.records):
        try:
            event = serde.decode(data, key)
        except DecodeError as error:
            raise SnapshotUnusable(f"its record {index} cannot be decoded: {error}") from error
        if not isinstance(event, Event):
            raise SnapshotUnusable(f"its record {index} is a {event.type}, not an event")
        events.append(event)
    return events


def reading_starts(
    listed: Mapping[str, int],
    vouched: Mapping[str, int],
    covered: int,
    loaded: Mapping[str, LoadedSnapshot],
) -> dict[str, int]:
    """Run -> the offset from which a rebuild must read the records of each listed run: the
    covered offset for a run whose snapshot the checkpoint vouches for, the snapshot's through
    offset for another snapshot, else the run's first offset."""
    starts: dict[str, int] = {}
    for run_id, first in listed.items():
        snapshot = loaded.get(run_id)
        if snapshot is None:
            starts[run_id] = first
        elif vouched.get(run_id) == snapshot.snapshot.through_offset:
            starts[run_id] = max(covered, snapshot.snapshot.through_offset)
        else:
            starts[run_id] = snapshot.snapshot.through_offset
    return starts
