"""The runs sealed under one data key that have not ended: what ``agentlog erase`` checks before it
destroys a data subject's key (runtime.erasure), so that no run still writing under it is erased.

Which runs a subject's key seals is said by the records themselves: every sealed value names its
key id (runtime.log.sealing), and nothing else -- no schema field, no index -- records the
subject. So the question is "which runs that have not ended name this key", and the cheapest
correct place to ask it is where a worker's rebuild looks for the runs that have not ended, per
partition:

- the partition's latest checkpoint (the compacted checkpoints topic) lists the runs active at its
  ``covered_offset``, with the offset of each one's RunStarted: that one record is read per run;
- the events from ``covered_offset`` on (about one checkpoint interval of traffic) hold the runs
  started since;
- the commands from the checkpoint's ``commands_offset`` on hold the submissions no worker has
  turned into a run yet.

A run found there that names the key is then asked for its status (``RunHandle.status``, which reads
its own records through the run index); one that has not ended, or a submission not started yet,
is named. Cost: the checkpoints partition (one record per run the partition has seen, compacted),
one record per active run, and what was written since the last checkpoint -- not the events topic,
nor the audit store (which the sink fills with a lag, and which may not exist).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from runtime.client import Client
from runtime.errors import AgentlogError
from runtime.log.port.protocol import LogRecord
from runtime.log.records.events import PartitionCheckpoint, Record
from runtime.log.records.sealed_form import CONTENT_FIELDS, is_sealed, key_id_of
from runtime.log.records.status import has_ended
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.rebuild import checkpoint_key

NOT_STARTED = "submitted, not started"  # a submission no worker has handled yet


class UnreadableLog(AgentlogError):
    """A record that had to be read to tell a key's runs cannot be decoded."""


@dataclass(frozen=True)
class UnendedRun:
    run_id: str
    status: str  # "running", "parked", ..., or NOT_STARTED

    def describe(self) -> str:
        return f"{self.run_id} ({self.status})"


def unended_runs(client: Client, key_id: str) -> list[UnendedRun]:
    """The runs whose contents are sealed under ``key_id`` and that have not ended (submissions not
    started yet among them), in run id order. Raises UnreadableLog if a record read cannot be decoded."""
    settings, log = client.settings, client.log
    plain = _as_written(client.serde)
    candidates: set[str] = set()
    submitted: set[str] = set()
    events_from: dict[int, tuple[int | None, int | None]] = {}
    commands_from: dict[int, tuple[int | None, int | None]] = {}
    for partition in range(settings.partitions):
        checkpoint = _latest_checkpoint(client, plain, partition)
        if checkpoint is None:
            events_from[partition] = (None, None)
            commands_from[partition] = (None, None)
            continue
        events_from[partition] = (checkpoint.covered_offset, None)
        commands_from[partition] = (checkpoint.commands_offset, None)
        for run_id, first in checkpoint.active_runs.items():
            for record in log.read(settings.events_topic, partition, first, first + 1):
                if _names(plain, record, settings.events_topic, partition, key_id) == run_id:
                    candidates.add(run_id)
    for topic, ranges, found in (
        (settings.events_topic, events_from, candidates),
        (settings.commands_topic, commands_from, submitted),
    ):
        for partition, record in log.read_partitions(topic, ranges):
            run_id = _names(plain, record, topic, partition, key_id)
            if run_id:
                found.add(run_id)
    unended: list[UnendedRun] = []
    for run_id in sorted(candidates | submitted):
        status = client.run(run_id).status().status
        if status == "unknown" and run_id in submitted:
            unended.append(UnendedRun(run_id, NOT_STARTED))
        elif status != "unknown" and not has_ended(status):
            unended.append(UnendedRun(run_id, status))
    return unended


def listed(runs: Iterable[UnendedRun], limit: int = 10) -> str:
    """``runs`` for a message: the first ``limit`` named, then how many more."""
    runs = list(runs)
    named = ", ".join(r.describe() for r in runs[:limit])
    return named + (f" and {len(runs) - limit} more" if len(runs) > limit else "")


def _as_written(serde: Serde) -> Serde:
    """``serde`` without its sealer: records decoded as written, their content fields still sealed
    -- the key ids they name are what is looked for, and no key is read or waited for."""
    plain = copy.copy(serde)
    plain.sealer = None
    return plain


def _latest_checkpoint(client: Client, plain: Serde, partition: int) -> PartitionCheckpoint | None:
    key = checkpoint_key(partition)
    found: PartitionCheckpoint | None = None
    topic = client.settings.checkpoints_topic
    for record in client.log.read(topic, partition, keep=lambda k: k == key):
        checkpoint = _decoded(plain, record, topic, partition)
        if isinstance(checkpoint, PartitionCheckpoint) and (
            found is None or checkpoint.covered_offset > found.covered_offset
        ):
            found = checkpoint
    return found


def _names(plain: Serde, record: LogRecord, topic: str, partition: int, key_id: str) -> str:
    """The run id of ``record`` if one of its sealed content fields names ``key_id``, else ""."""
    if record.value is None or record.key is None:
        return ""
    decoded = _decoded(plain, record, topic, partition)
    for name in CONTENT_FIELDS.get(decoded.type, ()):
        if any(is_sealed(value) and key_id_of(value) == key_id for value in _values(getattr(decoded, name))):
            return decoded.run_id
    return ""


def _values(field: object) -> Iterator[str]:
    if isinstance(field, str):
        yield field
    elif isinstance(field, list):
        yield from (item for item in field if isinstance(item, str))


def _decoded(plain: Serde, record: LogRecord, topic: str, partition: int) -> Record:
    try:
        return plain.decode(record.value or b"", record.key, topic)
    except DecodeError as error:
        raise UnreadableLog(
            f"cannot tell which runs are sealed under the key: {topic}[{partition}]@{record.offset} "
            f"cannot be decoded ({error})"
        ) from error
