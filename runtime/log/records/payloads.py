"""Call results stored out of line, so a history stays small to replay.

A model completion of tens of kilobytes, recorded inline forty times, makes a run's history
large: slow to rebuild, quick to reach the history limit, heavy in the audit store. A result
larger than ``Settings.payload_inline_limit`` is appended to the payloads topic -- in the run's
partition, acknowledged before the event that points at it -- and the ``...Completed`` event
keeps its offset, size and sha256 instead of the text. Replay reads back what it needs with
one range read per partition and checks each sha256; the workflow sees the same value either way.
The payloads topic is a Kafka topic kept forever, like the events: the log stays the one source
of truth (an object store would be a second one).

Model-call messages too large for their record are stored there the same way
(runtime.log.records.prompts: blob pointers); ``read_blobs`` reads them back by offset and sha256.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Protocol

from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import Event, ModelCallCompleted, ToolCallCompleted
from runtime.log.records.prompts import blob_refs
from runtime.log.records.sealed_form import ERASED, PREFIX

Completed = ModelCallCompleted | ToolCallCompleted
SEALED = PREFIX.encode("ascii")


class Opener(Protocol):
    """What opens a sealed payload (runtime.log.sealing's ``Sealer``): named here, not imported, so
    the records do not depend on the sealer that depends on them."""

    def open_text(self, value: str, field: str) -> str: ...


class PayloadMissing(AgentlogError):
    """An out-of-line result could not be read back intact; the message says which."""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outlined(event: Completed, offset: int, data: bytes) -> Completed:
    """``event`` pointing at its result stored at ``offset`` instead of carrying it."""
    return dataclasses.replace(
        event, result="", result_offset=offset, result_sha256=sha256_of(data), result_size=len(data)
    )


def is_outlined(event: Event) -> bool:
    return isinstance(event, (ModelCallCompleted, ToolCallCompleted)) and event.result_offset is not None


def inline(event: Completed, text: str) -> Completed:
    """The same event carrying its result again (what replay hands the workflow)."""
    return dataclasses.replace(event, result=text, result_offset=None, result_sha256=None, result_size=0)


def read_back(
    log: EventLog, topic: str, partition: int, events: Iterable[Event], sealer: Opener | None = None
) -> dict[int, str]:
    """The out-of-line results ``events`` point at, by offset: one range read of the payloads
    partition, each checked against its sha256. Raises PayloadMissing naming the first lost one.
    ``sealer`` opens those stored sealed (``Settings.seal_contents``): the sha256 is the plain
    text's, and an erased one reads as ERASED."""
    wanted = {
        e.result_offset: e.result_sha256
        for e in events
        if isinstance(e, (ModelCallCompleted, ToolCallCompleted)) and e.result_offset is not None
    }
    return _read_checked(log, topic, partition, wanted, "result", sealer)


def read_blobs(
    log: EventLog, topic: str, events: Iterable[Event], sealer: Opener | None = None
) -> dict[str, str]:
    """The messages stored out of line that ``events`` point at (runtime.log.records.prompts), by sha256:
    one range read per partition they name (the run's own, or for a reset or fork also its
    original's), each checked. Raises PayloadMissing naming the first lost or altered one."""
    by_partition: dict[int, dict[int, str]] = {}
    for ref in blob_refs(events):
        by_partition.setdefault(ref.partition, {})[ref.offset] = ref.sha256
    texts: dict[str, str] = {}
    for partition, wanted in sorted(by_partition.items()):
        found = _read_checked(log, topic, partition, wanted, "message", sealer)
        texts.update((wanted[offset], text) for offset, text in found.items())
    return texts


def _read_checked(
    log: EventLog,
    topic: str,
    partition: int,
    wanted: Mapping[int, str | None],
    what: str,
    sealer: Opener | None = None,
) -> dict[int, str]:
    found: dict[int, str] = {}
    if not wanted:
        return found
    start, end = min(wanted), max(wanted) + 1
    for record in log.read(topic, partition, start, end):
        digest = wanted.get(record.offset)
        if digest is None or record.value is None:
            continue
        plain = record.value
        if sealer is not None and plain.startswith(SEALED):
            text = sealer.open_text(plain.decode("ascii"), "payload")
            if text == ERASED:  # its key was destroyed: nothing left to check
                found[record.offset] = text
                continue
            plain = text.encode("utf-8")
        if sha256_of(plain) == digest:
            found[record.offset] = plain.decode("utf-8")
    for offset in sorted(wanted):
        if offset not in found:
            raise PayloadMissing(
                f"the {what} stored out of line at {topic}[{partition}]@{offset} "
                f"is missing or does not match its sha256 {wanted[offset]}"
            )
    return found


def inlined(events: list[Event], results: dict[int, str]) -> list[Event]:
    """``events`` with every out-of-line result carried again (``results`` from ``read_back``)."""
    return [
        inline(e, results[e.result_offset])
        if isinstance(e, (ModelCallCompleted, ToolCallCompleted)) and e.result_offset is not None
        else e
        for e in events
    ]
