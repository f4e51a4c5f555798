"""Admission control: at most ``Settings.run_cache_size`` busy runs in memory; the rest wait their turn.

The run cache (runtime.worker.run_cache) evicts runs that *wait*; nothing there bounds the runs
that are *busy* -- a call in flight, a signal being applied. 100,000 waiting runs whose signals all
arrive at once were all woken, all busy, all in memory at once (1.7 GB of RSS, which CPython keeps
after the burst). Here a command that would bring a run into memory -- a submission, or a signal
to a run that is evicted -- is **held** while ``run_cache_size`` runs are busy, and **admitted**
as busy runs end or start waiting (then evictable): memory follows the cache size, not the burst.

What is never held (no new run in memory, or must not starve):
- a command for a run in memory (a signal to a cached run) -- unless a command of the same run is
  held before it: a run's commands are applied in their order;
- a cancel of a live run, even an evicted one (woken at once): a cancel never waits behind a
  queue of submissions;
- what costs nothing: a command for a run that ended (ignored), a duplicate, a keyless or
  misrouted one (rejected, forwarded).
A timer that falls due for an evicted run is held the same way (a burst of timers is a burst of
wakes), and fired once admitted.

**Offsets.** Held commands are handled out of their offsets' order, and a crash must neither skip
nor repeat one. So (runtime.worker.held_commands):
1. the offset a checkpoint commits is the *first held* command's (``commit_point``), not the next
   one to read;
2. the commands handled past it are listed in the checkpoint (``commands_handled``);
3. a takeover resumes at the committed offset and skips the commands the checkpoint lists and
   those the log names as handled (every event a command produced carries its ``command_offset``),
   up to the highest one named (``CommandWindow``); the others -- held when the last owner stopped,
   or ignored -- are handled again. A signal or cancel ignored because its run had not started
   yet is ignored again (``CommandWindow.started_after``): its run's submission came after it.

**Liveness.** The commands intake keeps polling (the group's liveness never waits on a held
command); a partition whose held commands reach ``PAUSE_AT`` is paused at the feed (librdkafka's
pause: no more fetched) and resumed once they are down to ``RESUME_AT``, so the queue itself
stays bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from runtime.log.port.partitioning import partition_of_key
from runtime.log.port.protocol import Delivery
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.heap import release_free_heap
from runtime.worker.partition import OwnedPartition
from runtime.worker.run_cache import RunCache

log = logging.getLogger("agentlog.worker")

# Held commands of one partition past which its fetching is paused, and at which it resumes. A held
# command is its Delivery (key and value: a few hundred bytes), so 12 partitions at the bound
# hold ~10 MB: a burst of 100,000 signals waits in Kafka, not in the worker.
PAUSE_AT = 2_000
RESUME_AT = PAUSE_AT // 2

CANCEL_RECORD = "CancelRequested"

# Admissions after which the C heap's free memory is returned once every queue has drained: a burst
# worked through the cache frees what its runs held (runtime.worker.heap).
TRIM_AFTER = 1_000


class FeedControl(Protocol):
    """Pausing and resuming a partition's fetching (the commands intake: runtime.worker.intake)."""

    def pause(self, partition: int) -> None: ...

    def resume(self, partition: int) -> None: ...


Release = Callable[[OwnedPartition, Delivery], None]
Schedule = Callable[[Callable[[], None]], object]


def _soon(call: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_soon(call)


class Admission:
    """Holds the commands that would bring a run into memory while the cache is full of busy runs."""

    def __init__(
        self,
        capacity: int,
        runs: RunCache,
        serde: Serde,
        partitions: int,
        release: Release,
        fail: Callable[[str], None],
        schedule: Schedule = _soon,
    ) -> None:
        self.capacity = capacity
        self.runs = runs
        self.serde = serde
        self.partitions = partitions
        self.release = release  # the command handled now (CommandHandler.handle_now)
        self.fail = fail
        self.schedule = schedule
        self.feed: FeedControl | None = None  # set once the intake runs
        # Partitions with held commands, in the order they first held one: admitted in turn.
        self._waiting: dict[int, OwnedPartition] = {}
        self._timers: deque[tuple[OwnedPartition, tuple[str, int]]] = deque()  # timers due, held
        self._scheduled = False
        self._admitted_since_trim = 0
        runs.room_made = self.poke
        runs.admit_wake = self._timer_admitted

    # ------------------------------------------------------------------ deciding
    def room(self) -> bool:
        return self.runs.busy() < self.capacity

    def held(self) -> int:
        """Commands and timers held, over all owned partitions (the ``agentlog_commands_held`` gauge)."""
        return sum(len(owned.admission.queue) for owned in self._waiting.values()) + len(self._timers)

    def takes(self, owned: OwnedPartition, delivery: Delivery) -> bool:
        """True if ``delivery`` is not to be handled now: handled before a takeover (skipped), or
        held for admission. Called in offset order, before the command is handled."""
        offset = delivery.offset
        if owned.window is not None and owned.window.skips(offset):
            self.note_handled(owned, offset)
            return True
        key = delivery.key
        if not key:
            return False  # rejected at once, for nothing
        try:
            run_id = key.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if partition_of_key(key, self.partitions) != delivery.partition:
            return False  # forwarded to its home partition
        held = owned.admission
        live = run_id in owned.runs or run_id in owned.evicted
        if held.runs.get(run_id):  # behind its run's held commands, in their order
            if live and self._is_cancel(delivery):
                return False
            return self._hold(owned, delivery, run_id)
        if run_id in owned.runs:
            return False
        if not live and run_id in owned.known_runs:
            return False  # ended: ignored (a signal) or a duplicate (a submission)
        # A submission or a wake: a run comes into memory.
        if not held.queue and self.room():
            return False
        if live and self._is_cancel(delivery):
            return False
        return self._hold(owned, delivery, run_id)

    def _is_cancel(self, delivery: Delivery) -> bool:
        if delivery.value is None:
            return False
        try:
            return self.serde.record_name(delivery.value).rpartition(".")[2] == CANCEL_RECORD
        except DecodeError:
            return False  # handled in its turn, rejected there

    def _hold(self, owned: OwnedPartition, delivery: Delivery, run_id: str) -> bool:
        held = owned.admission
        held.hold(delivery, run_id)
        owned.next_command = max(owned.next_command, delivery.offset + 1)  # read; not handled
        self._waiting.setdefault(owned.partition, owned)
        if len(held.queue) >= PAUSE_AT and not held.paused and self.feed is not None:
            held.paused = True
            self.feed.pause(owned.partition)
            log.info(
                json.dumps(
                    {"event": "commands_paused", "partition": owned.partition, "held": len(held.queue)}
                )
            )
        return True

    def note_handled(self, owned: OwnedPartition, offset: int) -> None:
        """The command at ``offset`` is handled (or skipped as handled): read past it, and list it
        for the next checkpoint if an earlier one is still held."""
        lowest = commit_point(owned)
        owned.next_command = max(owned.next_command, offset + 1)
        owned.admission.note_handled(offset, lowest)
        if owned.window is not None and commit_point(owned) >= owned.window.high:
            owned.window = None  # every command it names is behind: what comes is new

    # ------------------------------------------------------------------ admitting
    def poke(self) -> None:
        """A busy run ended or began waiting: admit what is held, in a later turn of the loop (not
        inside the flush that made room)."""
        if not self._scheduled and (self._waiting or self._timers):
            self._scheduled = True
            self.schedule(self.admit)

    def admit(self) -> None:
        """Admit held timers and commands, a partition at a time in turn, while there is room."""
        self._scheduled = False
        while self.room() and (self._waiting or self._timers):
            if self._timers:
                owned, key = self._timers.popleft()
                if not owned.lost:
                    self.runs.fire(owned, key, admitted=True)
            for partition, owned in list(self._waiting.items()):
                if not self.room():
                    break
                held = owned.admission
                if owned.lost or not held.queue:
                    del self._waiting[partition]
                    continue
                delivery = held.release()
                if not held.queue:
                    del self._waiting[partition]
                if held.paused and len(held.queue) <= RESUME_AT and self.feed is not None:
                    held.paused = False
                    self.feed.resume(partition)
                self.runs.metrics.commands_admitted += 1
                self._admitted_since_trim += 1
                try:
                    self.release(owned, delivery)
                except Exception as error:  # handle_now raises only to stop the worker
                    self.fail(str(error))
                    return
        if not self._waiting and not self._timers and self._admitted_since_trim >= TRIM_AFTER:
            self._admitted_since_trim = 0
            release_free_heap()

    def _timer_admitted(self, owned: OwnedPartition, key: tuple[str, int]) -> bool:
        """Whether the timer ``key`` due now may wake its evicted run; if not, it is held."""
        if not self._timers and self.room():
            return True
        self._timers.append((owned, key))
        return False


def commit_point(owned: OwnedPartition) -> int:
    """The commands offset a checkpoint of ``owned`` commits: the first command not handled."""
    first = owned.admission.first()
    return owned.next_command if first is None else min(first, owned.next_command)
