"""Comparing a checkpointed rebuild with a full read of the same partition."""

from __future__ import annotations

from typing import Any

from runtime.config import Settings
from runtime.log.port import EventLog
from runtime.log.serde import Serde
from runtime.worker.rebuild import RebuiltPartition, rebuild


def without_checkpoints(settings: Settings) -> Settings:
    """The same deployment seen through an empty checkpoints topic: its rebuild reads everything."""
    return settings.model_copy(update={"checkpoints_topic": settings.checkpoints_topic + ".none"})


def full_read(settings: Settings, serde: Serde, log: EventLog, partition: int, end: int) -> RebuiltPartition:
    """The rebuild of ``partition`` up to ``end`` from offset 0, ignoring checkpoints and snapshots
    (on Kafka the empty checkpoints topic must exist: ``infra.topics.ensure_topics``)."""
    return rebuild(without_checkpoints(settings), serde, log, partition, end)


def state_of(rebuilt: RebuiltPartition) -> dict[str, Any]:
    """What a worker resumes from a rebuild: its active runs with their events, framed records,
    first offsets and sizes, the runs it knows, where commands resume and what it cannot load."""
    return {
        "active": rebuilt.active,
        "records": {run: rebuilt.records[run] for run in rebuilt.active},
        "first_offsets": {run: rebuilt.first_offsets[run] for run in rebuilt.active},
        "sizes": {run: rebuilt.sizes[run] for run in rebuilt.active},
        "known_runs": rebuilt.known_runs,
        "commands_offset": rebuilt.commands_offset,
        "unloadable": rebuilt.unloadable,
        "to_continue": rebuilt.to_continue,
    }
