"""Comparing a checkpointed rebuild with a full read of the same partition."""

from __future__ import annotations

import json
from typing import Any

from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.schemas.serde import Serde
from runtime.worker.rebuild import CheckpointRead, RebuiltPartition, latest_checkpoint, rebuild
from support.workers import WorkerProcess


def without_checkpoints(settings: Settings) -> Settings:
    """The same deployment seen through an empty checkpoints topic: its rebuild reads everything."""
    return settings.model_copy(update={"checkpoints_topic": settings.checkpoints_topic + ".none"})


def full_read(settings: Settings, serde: Serde, log: EventLog, partition: int, end: int) -> RebuiltPartition:
    """The rebuild of ``partition`` up to ``end`` from offset 0, ignoring checkpoints and snapshots
    (on Kafka the empty checkpoints topic must exist: ``infra.topics.ensure_topics``)."""
    return rebuild(without_checkpoints(settings), serde, log, partition, end)


def state_of(rebuilt: RebuiltPartition) -> dict[str, Any]:
    """What a worker resumes from a rebuild: its live runs with their framed records (replayed, or
    indexed as waiting without replay: the same records either way), first offsets and sizes, the
    runs it knows, where commands resume and what it cannot load."""
    live = sorted([*rebuilt.active, *rebuilt.waiting])
    return {
        "live": live,
        "records": {run: rebuilt.records[run] for run in live},
        "first_offsets": {run: rebuilt.first_offsets[run] for run in live},
        "sizes": {run: rebuilt.sizes[run] for run in live},
        "known_runs": rebuilt.known_runs,
        "commands_offset": rebuilt.commands_offset,
        "unloadable": rebuilt.unloadable,
        "to_continue": rebuilt.to_continue,
    }


def vouched_snapshot(
    settings: Settings, serde: Serde, log: EventLog, partition: int, run_id: str, past: int
) -> CheckpointRead | None:
    """What the checkpoints topic holds, once its latest checkpoint covers ``past`` and vouches
    for a snapshot of ``run_id``; else None."""
    read = latest_checkpoint(settings, serde, log, partition)
    if read.checkpoint is None or read.checkpoint.covered_offset < past or run_id not in read.vouched():
        return None
    return read


def partition_taken(worker: WorkerProcess) -> dict[str, object] | None:
    """The worker's ``partition_taken`` log line, once written."""
    for line in worker.log_path.read_text(errors="replace").splitlines():
        start = line.find('{"event": "partition_taken"')
        if start >= 0:
            taken: dict[str, object] = json.loads(line[start:])
            return taken
    return None
