"""The run cache: which live runs a worker keeps in memory, and the one way back for the others.

A worker keeps at most ``Settings.run_cache_size`` runs in memory (``OwnedPartition.runs``), across
its partitions. Past that, the least recently active runs that wait only on signals or timers
(``RunInstance.waiting()``) are evicted: the run is closed (``RunInstance.close()``: its workflow
coroutine gets GeneratorExit) and dropped, and the partition keeps only what it needs of it --
its framed records in ``OwnedPartition.records`` (what snapshots and checkpoints hold anyway),
its sizes, first offset and chain tip, and an :class:`~runtime.worker.partition.Evicted` entry
(its workflow, its timers' positions and due times). A run with a call in flight, a permit or
retry wait, or anything else to do is never evicted: ``waiting()`` is False for it. Nor does an
eviction lose a record the run produced: every activation's records are handed to the batcher,
and so to ``OwnedPartition.records``, before the flush that may evict (a write that then fails
stops the worker, whose successor rebuilds from the log).

Anything that reaches an evicted run -- a signal, a cancel, a timer due -- asks :meth:`RunCache.run`
for it, which wakes it through the one door: its records decoded (payloads stored out of line read
back, as a rebuild does), ``new_run`` + ``activate(Wake(events))``, the wake's completion flushed
(it re-arms the run's timers, which are not armed twice); then the caller applies what arrived.
Timers hold the run id, not the run (:meth:`RunCache.arm`): an evicted run's timers still fire,
and waking it is the first thing a firing does. A run whose results were stored out of line reads
them back on its wake (one range read of the payloads topic, on the loop, as a rebuild does).

A takeover indexes the runs its checkpoint lists as waiting as evicted ones, without decoding
them (runtime.worker.rebuild, ``waiting_runs``): :meth:`RunCache.arm_evicted` arms their timers.

Eviction runs after each flush of a run's activation (``Executor.flush`` calls :meth:`touch`),
which also notes whether the run now waits: the runs that may be evicted are kept in their own
least-recently-active order, so an eviction takes the oldest of them at once, and thousands of busy
runs (calls in flight, a burst of signals) cost a step nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import Event, RunParked, RunStarted
from runtime.log.records.payloads import PayloadMissing, inlined, is_outlined, read_back
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.garbage import GarbageWatch
from runtime.worker.heap import release_free_heap
from runtime.worker.metrics import WorkerMetrics
from runtime.worker.partition import Evicted, OwnedPartition
from runtime.worker.resources import wake_failure
from runtime.worker.versions import CodeVersions
from runtime.workflow.activation import Completion, RunInstance, TimerDue, Wake
from runtime.workflow.app import App
from runtime.workflow.instance import new_run

log = logging.getLogger("agentlog.worker")

# Evictions between two returns of the C heap's free memory to the system (runtime.worker.heap):
# the evicted runs' larger allocations (dict tables) are freed to it, not to the system. Measured
# (20,000 runs waiting past a cache of 2,000, one worker): 136 MB of RSS trimming every 10,000
# evictions, 120 MB every 2,000; a trim takes a few milliseconds.
TRIM_EVERY = 2_000

# The workflow of a run a takeover indexed without decoding it (runtime.worker.rebuild): known once woken.
UNREPLAYED = ""

Flush = Callable[[OwnedPartition, RunInstance, Completion], None]


class RunCache:
    """The worker's runs in memory, least recently active first; evicts and wakes them."""

    def __init__(
        self,
        app: App,
        settings: Settings,
        serde: Serde,
        log: EventLog,
        metrics: WorkerMetrics,
        flush: Flush,
        append: Callable[[OwnedPartition, list[Event]], object],
        fail: Callable[[str], None],
    ) -> None:
        self.app = app
        self.versions = CodeVersions(app)  # the executor's, once it holds what-if code versions
        self.settings = settings
        self.serde = serde
        self.log = log
        self.metrics = metrics
        self.flush = flush
        self.append = append  # the batcher's: a parked run's record
        self.fail = fail
        self.capacity = settings.run_cache_size
        # Run id -> its partition, least recently active first: the runs in memory (entries of a
        # lost partition, or of a run that ended, are dropped when met).
        self._order: OrderedDict[str, OwnedPartition] = OrderedDict()
        # Those of them that wait only on signals or timers (may be evicted), least recently active first.
        self._idle: OrderedDict[str, OwnedPartition] = OrderedDict()
        self._workflows: dict[str, str] = {}  # one string per workflow name for every evicted run
        self._evicted_since_trim = 0
        self.garbage = GarbageWatch()  # the cycles runs leave behind when they leave memory
        # Admission control (runtime.worker.admission): told when a busy run ends or begins
        # waiting, and asked before a timer wakes an evicted run.
        self.room_made: Callable[[], None] | None = None
        self.admit_wake: Callable[[OwnedPartition, tuple[str, int]], bool] | None = None

    # ------------------------------------------------------------------ in memory
    def touch(self, owned: OwnedPartition, run_id: str, run: RunInstance) -> None:
        """``run`` just stepped: it is the most recently active; evict past the capacity."""
        order = self._order
        if order.get(run_id) is owned:
            order.move_to_end(run_id)
        else:
            order[run_id] = owned
        # A run's waiting() changes only in an activation, and every activation is flushed here:
        # asked once now, it orders the runs that may be evicted without asking again later.
        if run.view.active and run.waiting() and run_id not in owned.child_sends:
            self._idle[run_id] = owned
            self._idle.move_to_end(run_id)
            if self.room_made is not None:
                self.room_made()
        else:
            self._idle.pop(run_id, None)
        if len(order) > self.capacity:
            self.evict_over(keep=run_id)
        self.metrics.run_cache_peak = max(self.metrics.run_cache_peak, len(order))

    def drop_partition(self, owned: OwnedPartition) -> None:
        """``owned`` was lost: its runs leave the cache now, not when an eviction round meets them."""
        for run_id in owned.runs:
            if self._order.get(run_id) is owned:
                del self._order[run_id]
            if self._idle.get(run_id) is owned:
                del self._idle[run_id]
        if self.room_made is not None:
            self.room_made()

    def drop(self, run_id: str) -> None:
        """``run_id`` ended (or left memory otherwise): no longer counted."""
        self._order.pop(run_id, None)
        self._idle.pop(run_id, None)
        self.garbage.let_go()
        if self.room_made is not None:
            self.room_made()

    def evict_over(self, keep: str | None = None) -> int:
        """Evict waiting runs, least recently active first, until at most ``capacity`` are in
        memory or none is left that waits; never ``keep``. How many were evicted. A run that is
        busy (a call in flight) is not in ``_idle``: many busy runs cost an eviction round nothing."""
        order, idle = self._order, self._idle
        evicted = 0
        kept: tuple[str, OwnedPartition] | None = None
        while len(order) > self.capacity and idle:
            run_id, owned = idle.popitem(last=False)
            run = None if owned.lost else owned.runs.get(run_id)
            if run is None:  # ended, or its partition was lost: not in memory any more
                if order.get(run_id) is owned:
                    del order[run_id]
            elif run_id == keep:
                kept = (run_id, owned)
            elif run.view.active and run.waiting() and run_id not in owned.child_sends:  # asked again
                self._evict(owned, run_id, run)
                evicted += 1
        if kept is not None:
            idle[kept[0]] = kept[1]
        self._evicted_since_trim += evicted
        if evicted:
            self.garbage.let_go(evicted)
        if self._evicted_since_trim >= TRIM_EVERY:
            self._evicted_since_trim = 0
            release_free_heap()
        return evicted

    def _evict(self, owned: OwnedPartition, run_id: str, run: RunInstance) -> None:
        del self._order[run_id]
        del owned.runs[run_id]
        workflow = run.view.workflow
        workflow = self._workflows.setdefault(workflow, workflow)
        owned.evicted[run_id] = Evicted(workflow, run.timers())
        run.close()
        self.metrics.run_evictions += 1

    def in_memory(self) -> int:
        return len(self._order)

    def busy(self) -> int:
        """Runs in memory that do not wait only on signals or timers: not evictable."""
        return len(self._order) - len(self._idle)

    # ------------------------------------------------------------------ waking
    def run(self, owned: OwnedPartition, run_id: str) -> RunInstance | None:
        """The live run ``run_id`` in memory, woken first if it was evicted; None if it is not live
        (ended, unknown, or parked because it could not be woken)."""
        run = owned.runs.get(run_id)
        if run is not None:
            return run
        evicted = owned.evicted.get(run_id)
        if evicted is None:
            return None
        return self._wake(owned, run_id, evicted)

    def _wake(self, owned: OwnedPartition, run_id: str, evicted: Evicted) -> RunInstance | None:
        """Replay an evicted run from its records through the one door (``Wake``)."""
        records = owned.records.get(run_id, [])
        key = run_id.encode()
        try:
            events = [self.serde.decode(value, key) for value in records]
            history = [e for e in events if isinstance(e, Event)]
            started = history[0] if history else None
            if not isinstance(started, RunStarted):
                raise AgentlogError(f"its {len(records)} records kept in memory do not start with RunStarted")
            if any(is_outlined(e) for e in history):  # replay hands the workflow the stored results
                stored = read_back(
                    self.log, self.settings.payloads_topic, owned.partition, history, self.serde.sealer
                )
                history = inlined(history, stored)
            run = self.versions.new_run(  # a what-if's run with its code version (runtime.worker.versions)
                started, owned.stamp, new_run, history_warn_events=self.settings.history_warn_events
            )
        except (DecodeError, PayloadMissing, AgentlogError) as error:
            self._park(owned, run_id, evicted.workflow, len(records), str(error))
            return None
        del owned.evicted[run_id]
        owned.runs[run_id] = run
        self.metrics.run_wakes += 1
        try:
            woken = run.activate(Wake(history))
        except Exception as error:  # as a takeover does: parked with why, the partition goes on
            del owned.runs[run_id]
            run.close()
            self._park(owned, run_id, evicted.workflow, len(records), wake_failure(run_id, error))
            return None
        self.flush(owned, run, woken)  # touches it (most recently active), re-arms its timers
        return run if owned.runs.get(run_id) is run else None

    def _park(self, owned: OwnedPartition, run_id: str, workflow: str, seq: int, reason: str) -> None:
        """A run that cannot be woken is parked with the reason (as a rebuild parks one), not lost."""
        log.error(json.dumps({"event": "run_wake_failed", "run": run_id, "reason": reason}))
        parked = RunParked(
            run_id=run_id,
            reason=f"cannot be woken on this worker: {reason}",
            seq=seq + 1,
            occurred_at=int(time.time() * 1000),
            worker=owned.stamp.worker,
            epoch=owned.epoch,
        )
        self.append(owned, [parked])
        self.metrics.run_ended(workflow, "parked")
        owned.forget(run_id)

    # ------------------------------------------------------------------ timers
    def arm(self, owned: OwnedPartition, run_id: str, position: int, fire_at: int) -> None:
        """Fire the timer (or signal timeout) of ``run_id`` at ``position`` at ``fire_at`` (ms since
        the epoch), unless it is armed already (a wake re-issues its timers)."""
        key = (run_id, position)
        if key in owned.timers or owned.lost:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, fire_at / 1000 - time.time())
        owned.timers[key] = loop.call_at(loop.time() + delay, self._fire, owned, key)

    def arm_evicted(self, owned: OwnedPartition) -> None:
        """Arm the timers of every run ``owned`` holds evicted (a takeover indexed them)."""
        for run_id, evicted in owned.evicted.items():
            for position, fire_at in evicted.timers:
                self.arm(owned, run_id, position, fire_at)

    def _fire(self, owned: OwnedPartition, key: tuple[str, int]) -> None:
        # Disarmed first: the wake below re-issues the run's timers, and this one is done with
        # once TimerDue is applied (Executor skips arming an intent whose future is done).
        owned.timers.pop(key, None)
        self.fire(owned, key)

    def fire(self, owned: OwnedPartition, key: tuple[str, int], admitted: bool = False) -> None:
        """Apply the timer ``key`` that fell due, waking its run first if it was evicted -- unless
        admission control holds the wake (then it calls back with ``admitted``)."""
        run_id, position = key
        try:
            if owned.lost:
                return
            if (
                not admitted
                and run_id in owned.evicted
                and self.admit_wake is not None
                and not self.admit_wake(owned, key)
            ):
                return
            run = self.run(owned, run_id)  # wakes it if it was evicted
            if run is None:
                return
            fired = run.activate(TimerDue(position))
            if fired.records:  # else the run no longer waits for it (ended, or the signal came)
                self.metrics.step(fired.view.workflow)
                self.flush(owned, run, fired)
        except Exception as error:  # a callback's error would only be logged: the worker stops on it
            log.exception("timer %s of run %s", position, run_id)
            self.fail(f"run {run_id}: its timer at position {position} could not be fired: {error}")


def waiting_runs(
    owned: OwnedPartition, counts: Mapping[str, int]
) -> dict[str, tuple[int, tuple[tuple[int, int], ...]]]:
    """The runs of ``owned`` waiting only on signals or timers, for a checkpoint taken now (its step
    1): run id -> (its record count, (position, fire_at) of each timer it waits for). Evicted runs
    wait by construction."""
    found: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}
    for run_id, evicted in owned.evicted.items():
        found[run_id] = (counts.get(run_id, 0), evicted.timers)
    for run_id, run in owned.runs.items():
        if run.view.active and run.waiting() and run_id not in owned.child_sends:
            found[run_id] = (counts.get(run_id, 0), run.timers())
    return found


def timer_key(run_id: str, position: int) -> str:
    """A timer's key in ``PartitionCheckpoint.waiting_timers``: "<run id>@<position>"."""
    return f"{run_id}@{position}"


def listed_timers(waiting_timers: Mapping[str, int]) -> dict[str, tuple[tuple[int, int], ...]]:
    """Run id -> (position, fire_at) of its timers, from ``PartitionCheckpoint.waiting_timers``."""
    found: dict[str, list[tuple[int, int]]] = {}
    for key, fire_at in waiting_timers.items():
        run_id, _, position = key.rpartition("@")
        found.setdefault(run_id, []).append((int(position), fire_at))
    return {run_id: tuple(sorted(timers)) for run_id, timers in found.items()}
