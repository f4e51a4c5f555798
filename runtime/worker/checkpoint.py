"""Checkpoints: where a rebuild of a partition may start, and where its commands resume.

Order, kept by ``Checkpointer.write`` and tested in tests/unit/test_worker_checkpoints.py and
tests/unit/test_history_snapshots.py:
1. send the records queued in this loop turn now, then take the partition's active runs, their
   record counts and the next command offset: the last record appended so far was just sent, so
   every record appended later gets a higher offset;
2. wait for the ack of that last record: every record step 1 describes lies below it, and
   everything below it is durable;
3. prove no newer claim precedes it (a fenced worker publishes nothing); then write the run
   index's locations of records at or below it (runtime.log.records.run_index);
4. append the history snapshots due (runtime.worker.snapshots), each holding a run's records
   counted in step 1, all below that offset + 1; then the ``CheckpointSnapshots`` naming the
   snapshots of runs that appended nothing after them, which the checkpoint vouches for;
5. append the checkpoint, whose ``covered_offset`` is that last acked offset + 1 and whose run
   offsets are acknowledged RunStarted records only; the runs it lists as waiting were waiting in
   step 1, so each of their records lies below it and any later one at or after it;
6. commit the commands offset of step 1;
7. tombstone the snapshots of runs that ended before step 1.
A checkpoint therefore never covers a record that was not acknowledged, a snapshot never holds
one, and the commands offset committed never passes a command whose events were not acknowledged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from runtime.config import Settings
from runtime.log.port.protocol import Committer, EventLog
from runtime.log.records.events import PartitionCheckpoint
from runtime.log.records.partition_signing import sign_value
from runtime.log.records.run_index import run_key
from runtime.log.schemas.serde import Serde
from runtime.worker.admission import commit_point
from runtime.worker.batching import send_partition
from runtime.worker.partition import OwnedPartition
from runtime.worker.rebuild import checkpoint_key
from runtime.worker.run_cache import timer_key, waiting_runs
from runtime.worker.snapshots import SnapshotWriter, live_record_counts

# A partition is checkpointed before its interval is up once every run its last checkpoint listed
# as active has ended, if a rebuild from that checkpoint would decode this many records (those
# runs' records and everything written since): a rebuild replays what was written after the
# latest checkpoint and every run it lists, so after a burst of runs a checkpoint that still lists
# the burst costs the whole burst (measured: a worker killed ~0.15 s after 200 runs of 40 steps
# ended decoded 23,800-31,600 records, 1.2-1.5 s, its last checkpoint 0.35 s old). The threshold and
# the spacing bound what this costs: a checkpoint is a handful of records.
EARLY_AFTER_RECORDS = 1_000
EARLY_SPACING_S = 0.05


class Checkpointer:
    """Writes a checkpoint of each owned partition with new writes, at most every ``interval_s``
    -- sooner once the runs the last one listed have all ended (``EARLY_AFTER_RECORDS``)."""

    def __init__(
        self,
        settings: Settings,
        serde: Serde,
        log: EventLog,
        worker_id: str,
        interval_s: float,
        still_owner: Callable[[OwnedPartition, int], Awaitable[bool]],
        lose: Callable[[int, str], None],
    ) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self.worker_id = worker_id
        self.interval_s = interval_s
        self.still_owner = still_owner
        self.lose = lose
        self._last_round = time.monotonic()
        self.snapshots = SnapshotWriter(settings, serde, log, worker_id)
        self.signer = self.snapshots.signer  # runtime.log.records.partition_signing

    def maybe_checkpoint(self, owned_partitions: list[OwnedPartition], feed: Committer) -> None:
        now = time.monotonic()
        round_due = now - self._last_round >= self.interval_s
        if round_due:
            self._last_round = now
        for owned in owned_partitions:
            if not owned.writes_since_checkpoint or owned.checkpoint_running or owned.last_write is None:
                continue
            early = (
                not owned.listed_at_checkpoint
                and owned.listed_records + owned.writes_since_checkpoint >= EARLY_AFTER_RECORDS
                and now - owned.last_checkpoint_at >= EARLY_SPACING_S
            )
            if round_due or early:
                owned.checkpoint_running = True
                owned.last_checkpoint_at = now
                owned.spawn(self.write(owned, feed))

    async def write(self, owned: OwnedPartition, feed: Committer) -> None:
        """One checkpoint of ``owned``, in the order of the module docstring."""
        try:
            if owned.lost:
                return
            send_partition(self.settings, self.log, asyncio.get_running_loop(), owned)
            assert owned.last_write is not None
            runs = [*owned.live_runs(), *owned.continuing]
            counts = live_record_counts(owned)
            waiting = waiting_runs(owned, counts)
            next_command = commit_point(owned)  # the first command held, if one is (admission)
            handled_past = owned.admission.handled_above(next_command)
            owned.writes_since_checkpoint = 0
            owned.listed_at_checkpoint = set(runs)
            owned.listed_records = sum(owned.sizes.get(run, (0, 0))[0] for run in runs)
            last = await owned.last_write
            if not await self.still_owner(owned, last):
                self.lose(owned.partition, "fenced while checkpointing")
                return
            active = owned.acked_first_offsets(runs)
            self._locate(owned, last, active)
            self.snapshots.write(owned, counts, last + 1, active)
            checkpoint = PartitionCheckpoint(
                run_id="",
                occurred_at=int(time.time() * 1000),
                worker=self.worker_id,
                epoch=owned.epoch,
                partition=owned.partition,
                covered_offset=last + 1,
                commands_offset=next_command,
                commands_handled=handled_past,
                active_runs=active,
                waiting_runs={run: count for run, (count, _) in waiting.items() if run in active},
                waiting_timers={
                    timer_key(run, position): fire_at
                    for run, (_, timers) in waiting.items()
                    if run in active
                    for position, fire_at in timers
                },
            )
            key = checkpoint_key(owned.partition)
            value = sign_value(self.signer, key, PartitionCheckpoint, self.serde.encode(checkpoint))
            self.log.append(self.settings.checkpoints_topic, owned.partition, key, value)
            feed.commit(owned.partition, next_command)
            self.snapshots.retire(owned, counts)
        finally:
            owned.checkpoint_running = False

    def _locate(self, owned: OwnedPartition, last: int, active: dict[str, int]) -> None:
        """Write the run index's locations that step 3 just proved: every record they point at is
        at or below ``last``, which no newer claim precedes, so none is fenced."""
        for run_id, location in owned.locations_through(last, active).items():
            self.log.append_unwatched(
                self.settings.checkpoints_topic, owned.partition, run_key(run_id), location.encode()
            )
