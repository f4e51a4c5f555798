"""What a worker holds for one partition it owns."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from runtime.log.port.protocol import Delivery
from runtime.log.records.run_index import RunLocation
from runtime.worker.held_commands import CommandWindow, HeldCommands
from runtime.workflow.activation import RunInstance
from runtime.workflow.intents import Stamp

FirstOffset = int | asyncio.Future[int] | None


def _settled(first: int | asyncio.Future[int]) -> int | None:
    if isinstance(first, int):
        return first
    if first.done() and not first.cancelled() and first.exception() is None:
        return first.result()
    return None


class Evicted(NamedTuple):
    """What a worker keeps of a live run it evicted from memory (runtime.worker.run_cache)."""

    workflow: str
    timers: tuple[tuple[int, int], ...]  # (position, fire_at ms) of the timers it waits for


@dataclass
class OwnedPartition:
    """One owned partition: its epoch, its live runs and what is queued for it this loop turn."""

    partition: int
    epoch: int
    stamp: Stamp
    next_command: int
    known_runs: set[str]  # every run id the partition has seen: a resubmission starts nothing
    runs: dict[str, RunInstance] = field(default_factory=dict)  # driven only by activate
    # Live runs not in memory (runtime.worker.run_cache): run id -> what they wait for; their
    # records stay in ``records``, and a wake replays them from there.
    evicted: dict[str, Evicted] = field(default_factory=dict)
    # Armed timers (runtime.worker.run_cache): (run id, position) -> its handle; they hold the run
    # id, not the run, so an evicted run's timers still fire.
    timers: dict[tuple[str, int], asyncio.TimerHandle] = field(default_factory=dict)
    first_offsets: dict[str, int] = field(default_factory=dict)  # where a rebuild reads a run from
    sizes: dict[str, list[int]] = field(default_factory=dict)  # run id -> [events, bytes]
    last_write: asyncio.Future[int] | None = None
    lost: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    writes_since_checkpoint: int = 0
    # Runs the last checkpoint lists as active and that have not ended since: once none is left,
    # a new checkpoint lets a rebuild skip all of them (runtime.worker.checkpoint).
    listed_at_checkpoint: set[str] = field(default_factory=set)
    listed_records: int = 0  # their records then: what a rebuild from that checkpoint decodes of them
    last_checkpoint_at: float = 0.0  # time.monotonic() when the last checkpoint began
    warned: set[str] = field(default_factory=set)  # runs warned of their history size
    # Runs that continued as new whose successor's submission is not acknowledged yet: listed in
    # checkpoints (with their first offsets) so a rebuild reads them and submits again.
    continuing: set[str] = field(default_factory=set)
    checkpoint_running: bool = False
    # Each live run's records as appended (framed bytes, in order): what its HistorySnapshot holds.
    records: dict[str, list[bytes]] = field(default_factory=dict)
    # Run -> (through_offset, record count) of its latest HistorySnapshot (runtime.worker.snapshots).
    snapshots: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Records appended during this turn of the event loop, sent together at its end (TurnBatcher).
    pending: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    pending_started: dict[int, str] = field(default_factory=dict)  # index -> run id: its first offset
    pending_last: asyncio.Future[int] | None = None
    pending_runs: list[str] = field(default_factory=list)  # started or rejected: to index
    # Runs whose RunStarted was sent and whose first offset is not noted yet: the ack of each.
    started_acks: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    # Ending events queued this turn: index -> (run id, its first offset or its RunStarted's ack).
    pending_ended: dict[int, tuple[str, FirstOffset]] = field(default_factory=dict)
    # Ended runs whose location the run index does not hold yet: (first offset, ending's ack).
    endings: dict[str, tuple[int | asyncio.Future[int], asyncio.Future[int]]] = field(default_factory=dict)
    located: set[str] = field(default_factory=set)  # live runs whose first offset the index holds
    # Run -> the link of its last record written or read (runtime.log.records.chain): the next
    # record's chains from it.
    chain_tips: dict[str, bytes] = field(default_factory=dict)
    # A submission waiting for its data key (runtime.worker.commands), then the commands delivered
    # behind it, in offset order: handled once the key has arrived (or the submission is rejected).
    held: list[Delivery] = field(default_factory=list)
    # Run -> the ack of its latest effect outcome (a tool with effect=True that ran), while that
    # ack may be pending: no call of the run starts before it (runtime.worker.execution), so an
    # effect that ran is never left in doubt behind a later call.
    effect_outcomes: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    # Run -> its child submissions not acknowledged yet (runtime.worker.children): such a run does
    # not count as waiting, so no checkpoint indexes it without replay before they are sent.
    child_sends: dict[str, int] = field(default_factory=dict)
    # Commands held while the run cache is full of busy runs (runtime.worker.admission), and after a
    # takeover the commands handled before it that are read again (skipped).
    admission: HeldCommands = field(default_factory=HeldCommands)
    window: CommandWindow | None = None

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coroutine`` as a task of this partition (cancelled when the partition is lost)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def forget(self, run_id: str) -> None:
        """Drop an ended run's state."""
        self.listed_at_checkpoint.discard(run_id)
        self.runs.pop(run_id, None)
        self.evicted.pop(run_id, None)
        self.first_offsets.pop(run_id, None)
        self.started_acks.pop(run_id, None)
        self.sizes.pop(run_id, None)
        self.chain_tips.pop(run_id, None)
        self.records.pop(run_id, None)
        self.effect_outcomes.pop(run_id, None)
        self.located.discard(run_id)

    def is_live(self, run_id: str) -> bool:
        """Whether ``run_id`` has not ended: in memory, or evicted from it."""
        return run_id in self.runs or run_id in self.evicted

    def live_runs(self) -> list[str]:
        """Every run that has not ended, in memory or evicted."""
        return [*self.runs, *self.evicted]

    def stop_timers(self) -> None:
        """Cancel every armed timer (the partition is lost, or the worker stops)."""
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()

    def first_offset_of(self, run_id: str) -> FirstOffset:
        """The run's first offset, or the ack that will tell it, or None if neither is known."""
        return self.first_offsets.get(run_id, self.started_acks.get(run_id))

    def note_ending(self, run_id: str, first: FirstOffset, ack: asyncio.Future[int]) -> None:
        """Remember where the run started and the ack of its ending event, for the run index."""
        first = first if first is not None else self.started_acks.get(run_id)
        if first is not None:
            self.endings[run_id] = (first, ack)

    def locations_through(self, upto: int, active: dict[str, int]) -> dict[str, RunLocation]:
        """The index entries to write once no newer claim precedes ``upto`` (so no record at or
        below it is fenced): ended runs whose ending event is acknowledged at or below it, and
        ``active`` runs (first offsets, all acknowledged below it) not located yet."""
        found: dict[str, RunLocation] = {}
        for run_id, (first, ack) in list(self.endings.items()):
            if not ack.done():
                continue
            if ack.cancelled() or ack.exception() is not None:
                del self.endings[run_id]  # not durable: the worker stops on it
                continue
            if ack.result() > upto:
                continue
            del self.endings[run_id]
            start = _settled(first)
            if start is not None:
                found[run_id] = RunLocation(start, ack.result())
                if run_id in self.continuing:  # still listed as active: keeps its ending's entry
                    self.located.add(run_id)
        for run_id, start in active.items():
            if run_id not in self.located and run_id not in self.endings:
                found[run_id] = RunLocation(start)
                self.located.add(run_id)
        return found

    def note_first_offset(self, run_id: str, ack: asyncio.Future[int]) -> None:
        """Note where a rebuild reads ``run_id`` from, given its RunStarted's settled ``ack`` (a run
        that ended meanwhile, or whose start was not acknowledged, is not noted)."""
        if self.started_acks.get(run_id) is ack:
            del self.started_acks[run_id]
        if (
            not ack.cancelled()
            and ack.exception() is None
            and (self.is_live(run_id) or run_id in self.continuing)
        ):
            self.first_offsets.setdefault(run_id, ack.result())

    def acked_first_offsets(self, run_ids: list[str]) -> dict[str, int]:
        """The first offsets of those of ``run_ids`` whose RunStarted is acknowledged.

        Read from the acks themselves: the done callback that notes an offset runs a loop turn
        after its ack settles, and a checkpoint that resumes in that turn (its ``last_write``
        already settled, so its ``await`` does not yield) would otherwise miss the run."""
        for run_id in run_ids:
            ack = self.started_acks.get(run_id)
            if ack is not None and ack.done():
                self.note_first_offset(run_id, ack)
        return {run_id: self.first_offsets[run_id] for run_id in run_ids if run_id in self.first_offsets}
