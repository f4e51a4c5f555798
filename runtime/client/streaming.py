"""Watching a run: its recorded history, then what it does as it happens (``RunHandle.stream``).

The reader (runtime.stream_seam says how the two parts join):
1. reads the run's events to their end -- an unknown run is refused at once; a run submitted but not
   started yet is waited for -- and shows them (``since="start"``), only its steps in progress
   (``"current"``), or nothing (``"now"``);
2. reads the run's partition of the stream topic from a few seconds before the first step the
   history leaves unfinished (``"now"``: from its end), showing each event ``Seam.admit`` lets through,
   the backlog up to where the partition ended when it started compacted (``compact``);
3. ends once the run's end was shown. Silent for a second, it reads the run's events again from
   where it stopped: an ending (or any step) the stream lost still reaches the reader.

A reader slower than the run never slows it: it falls behind in the topic. When retention deleted
records it had not read, it is shown a ``gap`` event naming them and goes on from the first still held.
On a log that is not Kafka (a client on the in-memory log) the stream topic is followed through the
log's port (runtime.log.port.streams); its worker publishes there given ``LogStreamOut``.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Literal

from runtime.client.reading import RunReader
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.kafka.backend import KafkaLog
from runtime.log.kafka.stream import StreamFollower, StreamGap
from runtime.log.port.streams import LogFollower, PartitionFollower
from runtime.log.records.events import Event
from runtime.log.records.stream import StreamEvent, StreamFormatError, decode, from_record
from runtime.stream_seam import Seam, compact, resume_from_ms, unfinished

Since = Literal["start", "now", "current"]
SINCE: tuple[str, ...] = ("start", "now", "current")

# The stream is read from this long before the first unfinished step: the clocks that stamped the
# records and the stream's records are the same worker's, but a batch may leave a little later.
MARGIN_MS = 5_000
IDLE_CHECK_S = 1.0  # silent this long, the reader reads the run's events again
START_WAIT_S = 30.0  # a submitted run not yet started is waited for this long


class UnknownRun(AgentlogError):
    """No run with this id was submitted to this deployment."""

    def __init__(self, run_id: str, settings: Settings) -> None:
        super().__init__(
            f"unknown run {run_id!r}: no submission or record of it in {settings.commands_topic} / "
            f"{settings.events_topic}"
        )
        self.run_id = run_id


def history_of(reader: RunReader, run_id: str, wait_s: float = START_WAIT_S) -> tuple[list[Event], int]:
    """The run's events and the offset after its last; UnknownRun if it was never submitted. A run
    submitted and not started yet is waited for, up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    submitted = False
    while True:
        end = reader.end_offset(reader.partition(run_id))
        logged = reader.logged(run_id, reader.location(run_id), end=end)
        if logged:
            return [e.event for e in logged], end
        if not submitted:
            submitted = _submitted(reader, run_id)
            if not submitted:
                raise UnknownRun(run_id, reader.settings)
        if time.monotonic() >= deadline:
            raise AgentlogError(f"run {run_id!r} was submitted but no worker started it within {wait_s:g} s")
        time.sleep(0.1)


def _submitted(reader: RunReader, run_id: str) -> bool:
    key = run_id.encode()
    commands = reader.log.read(
        reader.settings.commands_topic, reader.partition(run_id), keep=lambda k: k == key
    )
    return next(iter(commands), None) is not None


def stream_run(
    settings: Settings, reader: RunReader, run_id: str, since: Since = "start"
) -> Generator[StreamEvent, None, None]:
    """The run's stream events, as ``RunHandle.stream`` documents: its history is read now (an
    unknown run raises UnknownRun here), the rest as the iterator is read (close it to stop early)."""
    if since not in SINCE:
        raise ValueError(f"since must be one of {', '.join(SINCE)}, got {since!r}")
    events, end = history_of(reader, run_id)
    # "now" is when this was called, not when the iterator is first read.
    now = (
        reader.log.watermarks(settings.stream_topic, reader.partition(run_id))[1] if since == "now" else None
    )
    return _events(settings, reader, run_id, since, events, end, now)


def _events(
    settings: Settings,
    reader: RunReader,
    run_id: str,
    since: Since,
    events: list[Event],
    end: int,
    now: int | None,
) -> Generator[StreamEvent, None, None]:
    history = [s for e in events if (s := from_record(e)) is not None]
    seam = Seam(history)
    if since == "start":
        yield from history
    elif since == "current":
        yield from unfinished(history)
    if seam.ended:
        if since != "start":
            yield next(e for e in history if e.kind == "ended")
        return
    partition = reader.partition(run_id)
    follower: PartitionFollower = (
        StreamFollower(settings, settings.stream_topic, partition)
        if isinstance(reader.log, KafkaLog)
        else LogFollower(reader.log, settings.stream_topic, partition)  # the in-memory log's
    )
    try:
        resume_ms = resume_from_ms(history, max(e.occurred_at for e in events))
        yield from _follow(follower, reader, seam, run_id, resume_ms, end, now)
    finally:
        follower.close()


def _follow(
    follower: PartitionFollower,
    reader: RunReader,
    seam: Seam,
    run_id: str,
    resume_ms: int,
    end: int,
    now: int | None,
) -> Generator[StreamEvent, None, None]:
    high = follower.bounds()[1]
    start = now if now is not None else follower.offset_at(resume_ms - MARGIN_MS)
    follower.start(start)
    key = run_id.encode()
    backlog: list[StreamEvent] | None = [] if start < high else None  # None: caught up
    quiet_since = time.monotonic()
    while True:
        try:
            records = follower.poll(0.05 if backlog is not None else 0.2)
        except StreamGap as gap:
            yield StreamEvent(run_id, "gap", data={"reason": str(gap), "first_held": gap.first_held})
            continue
        shown: list[StreamEvent] = []
        for record in records:
            if record.key != key or record.value is None:
                continue
            try:
                event = decode(record.value)
            except StreamFormatError:
                continue  # another version's record: a view, skipped
            shown.extend(seam.admit(event))
        if backlog is not None:
            backlog.extend(shown)
            if follower.position is not None and follower.position >= high:
                shown, backlog = compact(backlog), None
            else:
                shown = []
        if shown:
            quiet_since = time.monotonic()
            yield from shown
        elif backlog is None and time.monotonic() - quiet_since >= IDLE_CHECK_S:
            # The truth, read again from where it was left: what the stream lost still arrives.
            quiet_since = time.monotonic()
            latest = reader.end_offset(reader.partition(run_id))
            if latest > end:
                for logged in reader.events(run_id, start=end, end=latest):
                    made = from_record(logged.event)
                    if made is not None:
                        yield from seam.admit(made)
                end = latest
        if seam.ended:
            return
