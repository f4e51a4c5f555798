"""Checkpoints: where a rebuild of a partition may start, and where its commands resume.

Order, kept by ``Checkpointer.write`` and tested in tests/unit/test_worker_checkpoints.py:
1. snapshot the partition's active runs and next command offset;
2. wait for the ack of the last record appended so far: every record the snapshot describes
   lies below it, and everything below it is durable;
3. prove no newer claim precedes it (a fenced worker publishes nothing);
4. append the checkpoint, whose ``covered_offset`` is that last acked offset + 1 and whose run
   offsets are acknowledged RunStarted records only;
5. commit the commands offset of the snapshot.
A checkpoint therefore never covers a record that was not acknowledged, and the commands
offset committed never passes a command whose events were not acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from runtime.config import Settings
from runtime.log.events import PartitionCheckpoint
from runtime.log.port import Committer, EventLog
from runtime.log.serde import Serde
from runtime.worker.partition import OwnedPartition
from runtime.worker.rebuild import checkpoint_key


class Checkpointer:
    """Writes a checkpoint of each owned partition with new writes, at most every ``interval_s``."""

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

    def maybe_checkpoint(self, owned_partitions: list[OwnedPartition], feed: Committer) -> None:
        if time.monotonic() - self._last_round < self.interval_s:
            return
        self._last_round = time.monotonic()
        for owned in owned_partitions:
            if (
                owned.writes_since_checkpoint
                and not owned.checkpoint_running
                and owned.last_write is not None
            ):
                owned.checkpoint_running = True
                owned.spawn(self.write(owned, feed))

    async def write(self, owned: OwnedPartition, feed: Committer) -> None:
        """One checkpoint of ``owned``, in the order of the module docstring."""
        try:
            assert owned.last_write is not None
            runs = [*owned.runs, *owned.continuing]
            next_command = owned.next_command
            owned.writes_since_checkpoint = 0
            last = await owned.last_write
            if not await self.still_owner(owned, last):
                self.lose(owned.partition, "fenced while checkpointing")
                return
            active = owned.acked_first_offsets(runs)
            checkpoint = PartitionCheckpoint(
                run_id="",
                occurred_at=int(time.time() * 1000),
                worker=self.worker_id,
                epoch=owned.epoch,
                partition=owned.partition,
                covered_offset=last + 1,
                commands_offset=next_command,
                active_runs=active,
            )
            self.log.append(
                self.settings.checkpoints_topic,
                owned.partition,
                checkpoint_key(owned.partition),
                self.serde.encode(checkpoint),
            )
            feed.commit(owned.partition, next_command)
        finally:
            owned.checkpoint_running = False
