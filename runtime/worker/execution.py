"""Carrying out what runs ask for: calls, timers and signal waits, and recording the outcomes.

Per step the commit path is, for an effect (a tool declared ``effect=True``):
    workflow issues the call -> its ...Scheduled record is appended -> wait for its ack
    (acked means durable, and so is everything before it in the partition)
    -> check no newer epoch claim precedes it -> call
    -> append ...Completed / ...Failed without waiting -> resume the workflow;
and for any other call (a model call, a tool without effect) the wait moves behind the call:
    workflow issues the call -> its ...Scheduled record is appended -> call (at once, while
    the record travels) -> wait for the Scheduled record's ack
    -> append ...Completed / ...Failed without waiting -> resume the workflow.
So a model or read-only call overlaps its produce -> ack round trip, and still no outcome is
recorded, nor served to the workflow, before its Scheduled record is durable: if that append
fails (WriteError) the outcome is dropped and the worker stops. What this gives up: a worker
that dies after such a call started but before its Scheduled record was durable leaves no trace
of it, so the successor runs it again as a first attempt, not "in doubt" -- the in-doubt report
names only calls whose Scheduled record is in the log. An effect is never in that position.
Nor is an effect that ran: the call after it waits for its ack before starting (an effect's
outcome unacknowledged would otherwise be lost with the call, and the finished effect run again
in doubt instead of the call in flight). Timers and signal waits start once their record is
acknowledged, as effects do.
One ack per call and no transaction per result; fencing is by epoch (runtime.log.records.fencing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from runtime import stagemarks
from runtime.config import Settings
from runtime.log.port.protocol import EventLog, OwnershipCheck, WriteError
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    PermitGranted,
    RunContinuedAsNew,
    ToolCallCompleted,
    ToolCallHeartbeat,
)
from runtime.log.records.payloads import outlined
from runtime.log.records.prompts import located
from runtime.models.deltas import deltas_to
from runtime.worker.batching import TurnBatcher
from runtime.worker.budgets import BudgetGuard, PriceBook
from runtime.worker.call_pool import CallPool
from runtime.worker.calls import attempt_once, completed, failed, retry_policy, skipped_in_fork
from runtime.worker.cancellation import CallTasks, cancels
from runtime.worker.children import SENT_BY_CHILDREN, ChildLinks
from runtime.worker.continuation import Continuer
from runtime.worker.heartbeats import CallBeats
from runtime.worker.limits.gate import PermitGate
from runtime.worker.limits.local import LocalPermits
from runtime.worker.limits.permits import Held, LimitUnsatisfiable, Need, Permits
from runtime.worker.metrics import WorkerMetrics
from runtime.worker.partition import OwnedPartition
from runtime.worker.resources import lacking, out_of
from runtime.worker.retrying import FINAL, RetryTrail, after_failure, wait_until
from runtime.worker.run_cache import RunCache
from runtime.worker.streaming import RunStreams
from runtime.worker.tracing import RunSpans
from runtime.worker.versions import CodeVersions
from runtime.workflow.activation import Completion, Deliver, Park, RunInstance, RunView
from runtime.workflow.app import App
from runtime.workflow.declared_limits import resolve_limits
from runtime.workflow.intents import Intent

log = logging.getLogger("agentlog.worker")

BLOB_ACK_TIMEOUT = 30.0  # seconds for a message stored out of line to be acknowledged


class Executor:
    """Carries out what a run's activation completed: stores its blobs, appends its records,
    starts its intents, and activates the run with each outcome."""

    def __init__(
        self,
        app: App,
        settings: Settings,
        log: EventLog,
        batcher: TurnBatcher,
        lose: Callable[[int, str], None],
    ) -> None:
        self.app = app
        # The code each run runs with: the app, or a what-if's code version (runtime.worker.versions).
        self.versions = CodeVersions(app)
        self.settings = settings
        self.log = log
        self.batcher = batcher
        self.lose = lose
        self.pool: CallPool | None = None  # the two below need the running loop: see start()
        self.ownership: OwnershipCheck | None = None
        # Set when a record the run depends on was not acknowledged: the worker stops on it.
        self.failure: str | None = None
        self.continuer = Continuer(settings, batcher.serde, log, self._fail)
        self.spans = RunSpans()
        self.metrics = WorkerMetrics()  # plain counters, read by a scrape (runtime.worker.metrics)
        # Runs' budgets, priced from Settings.price_table (a file that does not parse refuses the start).
        self.budgets = BudgetGuard(PriceBook(settings.price_table))
        # The app's limits with the deployment's overrides: a limit that cannot hold refuses the
        # worker's start here. ``permits``: every limit whole in this process (a local run) unless
        # the worker shares them with the deployment (SharedPermits); None when none is declared.
        self.limits = resolve_limits(app.limits, app.models, app.tools, settings.limits)
        self.permits: Permits | None = LocalPermits(self.limits) if self.limits else None
        self.gate: PermitGate | None = None  # set by start(): the calls' waits for permits
        self.call_tasks = CallTasks()  # each run's calls in flight, cancelled with it
        self.stream: RunStreams | None = None  # what runs do, for watchers (runtime.worker.streaming)
        # The runs in memory, at most Settings.run_cache_size; evicted ones woken from their records.
        self.runs = RunCache(
            app, settings, batcher.serde, log, self.metrics, self.flush, batcher.append, self._fail
        )
        self.children = ChildLinks(settings, batcher.serde, log, self._fail, self._retouch)
        self.runs.versions = self.versions

    def _fail(self, why: str) -> None:
        self.failure = self.failure or why

    def _retouch(self, owned: OwnedPartition, run_id: str) -> None:
        run = owned.runs.get(run_id)
        if run is not None and run.view.active:
            self.runs.touch(owned, run_id, run)  # its child submissions are sent: it may wait now

    def start(self, pool: CallPool, ownership: OwnershipCheck) -> None:
        self.pool, self.ownership = pool, ownership
        if self.permits is not None and self.limits:
            self.gate = PermitGate(self.limits, self.permits, self.metrics)
        self.spans.watch(asyncio.get_running_loop())

    def flush(
        self, owned: OwnedPartition, run: RunInstance, completion: Completion, effect_outcome: bool = False
    ) -> None:
        """Append what an activation of ``run`` produced; start the intents that became ready.
        ``effect_outcome``: what is appended holds the outcome of an effect that ran (held back the
        next call's start)."""
        events, ready, view = completion.records, completion.intents, completion.view
        if completion.blobs:
            stored = self._store_blobs(owned, view.run_id, completion.blobs, events)
            if stored is None:
                return  # the worker stops (``failure``); the run is rebuilt from its records
            events = stored
        if self.spans.on and view.active:
            self.spans.run_span(view, owned.stamp.worker)
        durable = self.batcher.append(owned, events) if events else None
        if self.stream is not None:  # watchers see the step as its record is written
            self.stream.appended(owned.partition, owned.epoch, view, events)
            if completion.signal_waits:  # no record stands for these
                self.stream.signal_waits(owned.partition, owned.epoch, view.run_id, completion.signal_waits)
        if effect_outcome and durable is not None:
            owned.effect_outcomes[view.run_id] = durable
        if view.active and self._over_history_limit(owned, view):
            ready = []  # parked: nothing more runs
            parked = run.activate(Park(self._history_limit_reason(owned, view)))
            durable = self.batcher.append(owned, parked.records) or durable
            view = parked.view
            if self.stream is not None:
                self.stream.appended(owned.partition, owned.epoch, view, parked.records)
        if not view.active:
            self.spans.run_ended(view.run_id, view.status)
            self.metrics.run_ended(view.workflow, view.status)
            continued = next((e for e in events if isinstance(e, RunContinuedAsNew)), None)
            if continued is not None:  # its first offset stays until the successor is submitted
                owned.runs.pop(view.run_id, None)
                owned.sizes.pop(view.run_id, None)
                self.continuer.after(owned, continued, view.workflow, durable, view.parent_run_id)
            elif self.children.after_end(owned, run, view, events, durable):
                owned.runs.pop(view.run_id, None)  # listed until its parent or children hear of it
                owned.sizes.pop(view.run_id, None)
            else:
                owned.forget(view.run_id)
            if self.batcher.serde.sealer is not None:  # its records are encoded: its ciphers are done
                self.batcher.serde.sealer.forget_run(view.run_id)
        if view.run_id in self.call_tasks and cancels(events):  # the calls the cancel stopped
            self.call_tasks.cancel(view.run_id)
        if ready and view.active:
            self.children.note_issued(owned, view.run_id, ready)
        for intent in ready:
            task = owned.spawn(self._carry_out(owned, run, intent, durable))
            if intent.kind in ("model", "tool"):
                self.call_tasks.add(view.run_id, task)
        if not view.active:
            self.runs.drop(view.run_id)
        elif owned.runs.get(view.run_id) is run:
            self.runs.touch(owned, view.run_id, run)  # the most recently active; may evict others

    def _over_history_limit(self, owned: OwnedPartition, view: RunView) -> bool:
        """Warn once past the warn threshold; True at the limit (Temporal's defaults): the run parks."""
        events, size = owned.sizes.get(view.run_id, (0, 0))
        s = self.settings
        if events >= s.history_limit_events or size >= s.history_limit_bytes:
            return True
        warned = owned.warned
        if (events >= s.history_warn_events or size >= s.history_warn_bytes) and view.run_id not in warned:
            warned.add(view.run_id)
            self.metrics.history_warning(view.workflow)
            log.warning(
                json.dumps(
                    {"event": "history_size_warning", "run": view.run_id, "events": events, "bytes": size}
                )
            )
        return False

    def _history_limit_reason(self, owned: OwnedPartition, view: RunView) -> str:
        events, size = owned.sizes.get(view.run_id, (0, 0))
        s = self.settings
        return (
            f"history limit reached: {events} events, {size} bytes (limit {s.history_limit_events} events or "
            f"{s.history_limit_bytes} bytes); carry state into a fresh run with ctx.continue_as_new"
        )

    def hold_versions(self, versions: Mapping[str, App]) -> None:
        """Run what-ifs of these code versions too (module:app -> the App; runtime.worker.versions)."""
        self.versions = self.runs.versions = CodeVersions(self.app, versions)

    async def still_owner(self, owned: OwnedPartition, upto: int) -> bool:
        if self.ownership is None or owned.lost:
            return False
        return await self.ownership.owned_through(owned.partition, upto)

    async def _carry_out(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        intent: Intent,
        durable: asyncio.Future[int] | None,
    ) -> None:
        """One intent of ``run``: a timer waited out, or a call run with its retries -- each step
        once the Scheduled record's ack allows it (the module docstring gives the order)."""
        ack = _SchedulingAck(durable)
        # An effect, a timer or a signal wait, or a call behind an effect's unacknowledged outcome,
        # starts after its Scheduled ack; any other call waits for it before its outcome is recorded.
        acked_first = (
            intent.effect
            or intent.kind in ("timer", "signal", *SENT_BY_CHILDREN)
            or _behind_effect(owned, run.view.run_id)
        )
        if acked_first and ack.pending is not None and not await self._acked(run, intent, ack):
            return
        if intent.kind in SENT_BY_CHILDREN and not owned.lost:  # runtime.worker.children
            self.children.carry_out(owned, run, intent)  # a run_on child of an ended run starts too
            return
        if not self._recordable(owned, run):
            return
        if intent.kind in ("timer", "signal"):
            await self._wait_timer(owned, run, intent)
        elif not intent.effect or await self._effect_may_run(owned, run, intent, ack):
            if run.view.spend is not None and not await self._within_budget(owned, run, intent, ack):
                return
            await self._call_with_retries(owned, run, intent, ack)

    async def _within_budget(
        self, owned: OwnedPartition, run: RunInstance, intent: Intent, ack: _SchedulingAck
    ) -> bool:
        """A model call that would start past the run's budget does not start: the run fails or
        parks, its Scheduled record durable first (runtime.worker.budgets)."""
        spend = run.view.spend
        exceeded = None if spend is None or intent.kind != "model" else self.budgets.exceeded(spend, intent)
        if exceeded is None:
            return True
        if (ack.pending is None or await self._acked(run, intent, ack)) and self._recordable(owned, run):
            self.flush(owned, run, run.activate(self.budgets.stop(exceeded)))
        return False

    async def _acked(self, run: RunInstance, intent: Intent, ack: _SchedulingAck) -> bool:
        """Wait for the intent's Scheduled ack unless it was awaited already (or nothing was
        appended with it): its offset vouches for the record (and all before it). False if that
        append failed: nothing of the call may then be recorded, and the worker stops
        (``failure``); its successor rebuilds the run from what the log holds."""
        if ack.pending is None:
            return True
        pending, ack.pending = ack.pending, None
        try:
            ack.offset = await pending
        except WriteError as error:
            self._fail(
                f"run {run.view.run_id}: the record scheduling {intent.kind} {intent.name!r} at position "
                f"{intent.position} was not acknowledged: {error}"
            )
            return False
        if stagemarks.ON:
            stagemarks.mark("scheduled acked", run.view.run_id, intent.position)
        return True

    async def _effect_may_run(
        self, owned: OwnedPartition, run: RunInstance, intent: Intent, ack: _SchedulingAck
    ) -> bool:
        """An effect runs only once no newer claim can precede its Scheduled record (for an
        in-doubt re-execution that record predates our claim, so our claim is the mark); in a fork
        it is recorded as skipped instead -- a fork compares, it never acts."""
        if not await self.still_owner(owned, ack.offset or owned.epoch):
            self.lose(owned.partition, f"fenced: a newer epoch claimed partition {owned.partition}")
            return False
        if run.view.dry_run:
            self.flush(owned, run, run.activate(Deliver(skipped_in_fork(intent))))
            return False
        return True

    async def _call_with_retries(
        self, owned: OwnedPartition, run: RunInstance, intent: Intent, ack: _SchedulingAck
    ) -> None:
        """Call until an attempt completes or fails for good by the tool's retry policy; every
        attempt's outcome is recorded."""
        policy = retry_policy(self.versions.of(run), intent)
        attempt = intent.failed_attempts + (2 if intent.in_doubt else 1)
        needs = self.gate.needs(intent, run.view.limit_keys) if self.gate is not None else ()
        trail: RetryTrail | None = None  # made at the first failure: most calls never need one
        # A run taken over: its call is not re-sent before the retry_at its last failure recorded.
        if intent.not_before and not await self._waited(
            owned, run, wait_until(intent.not_before, owned.stamp.clock)
        ):
            return
        while True:
            held = None
            if needs:  # waiting for a permit is no attempt: the attempt starts once it holds them
                held = self.gate.try_now(needs) if self.gate is not None else None
                if held is None:
                    held = await self._permitted(owned, run, intent, ack, attempt, needs)
                    if held is None:
                        return
            if self.stream is not None:
                self.stream.attempt(
                    owned.partition, owned.epoch, run.view.run_id, intent, attempt, owned.stamp.worker
                )
            started = time.perf_counter()
            try:
                outcome, elapsed = await self._attempt(owned, run, intent, attempt, started, held)
            except Exception as error:  # the call's own failure: recorded, retried by its policy
                elapsed = time.perf_counter() - started  # the call's own time, not the ack's
                trail = trail or RetryTrail.of(intent)
                then = after_failure(policy, error, attempt, trail, owned.stamp.clock(), elapsed)
                failure = failed(intent, error, attempt, started, then)
                if (
                    not await self._record_failure(owned, run, intent, ack, failure, elapsed, then.final)
                    or then.final
                ):
                    return
                # Out of descriptors, threads or memory no call goes well: the worker stops, and
                # its successor makes the call again (the failure recorded is not final).
                short_of = lacking(error)
                if short_of is not None:
                    if self.failure is None:  # one line: the first call to lack it says why the worker stops
                        where = f"{intent.kind} {intent.name!r} of run {run.view.run_id}"
                        self._fail(out_of(short_of, where, error))
                    return
                if not await self._waited(owned, run, then.wait(owned.stamp.clock)):
                    return
                attempt += 1
            else:
                await self._record_result(owned, run, intent, ack, outcome, elapsed)
                return

    async def _permitted(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        intent: Intent,
        ack: _SchedulingAck,
        attempt: int,
        needs: tuple[Need, ...],
    ) -> Held | None:
        """The permits of one attempt (runtime.worker.limits.gate), a wait recorded on the run; None
        when the call is not to be made (the wait could not be recorded, or no wait can admit it:
        then its final failure is recorded)."""
        assert self.gate is not None

        async def note(event: Event) -> bool:
            if ack.pending is not None and not await self._acked(run, intent, ack):
                return False
            if not self._recordable(owned, run):
                return False
            self.flush(owned, run, run.activate(Deliver(event)))
            if intent.effect and isinstance(event, PermitGranted) and owned.last_write is not None:
                # An effect starts once the record that lets it start is durable: recovered after a
                # crash, it is then in doubt, as an effect that may have run must be.
                try:
                    await owned.last_write
                except WriteError as error:
                    self._fail(
                        f"run {run.view.run_id}: the permit of {intent.name!r} was not acknowledged: {error}"
                    )
                    return False
            return True

        try:
            return await self.gate.acquire(needs, attempt, intent.position, note)
        except LimitUnsatisfiable as error:
            failure = failed(intent, error, attempt, time.perf_counter(), FINAL)
            await self._record_failure(owned, run, intent, ack, failure, 0.0, True)
            return None

    async def _waited(self, owned: OwnedPartition, run: RunInstance, waiting: Awaitable[None]) -> bool:
        """Wait before a call's next attempt; False if the run ended or the partition was lost meanwhile
        (a rate limit's wait lasts minutes: the next attempt is then not this worker's to send)."""
        await waiting
        return self._recordable(owned, run)

    async def _attempt(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        intent: Intent,
        attempt: int,
        started: float,
        held: Held | None = None,
    ) -> tuple[ModelCallCompleted | ToolCallCompleted, float]:
        """One attempt of the call, in its span: its outcome and its own time; raises what it raised.
        ``held``: its permits, released when it ends however it ends."""
        assert self.pool is not None
        # No span call at all while tracing is off (RunSpans.on): this is every step's path.
        span = (
            self.spans.call_started(run.view, owned.stamp.worker, intent, attempt) if self.spans.on else None
        )
        try:
            if stagemarks.ON:
                stagemarks.mark(f"call start {intent.kind}", run.view.run_id, intent.position)
            beats = self._heartbeats(owned, run, intent, attempt) if intent.kind == "tool" else None
            sink = (
                self.stream.sink(owned.partition, owned.epoch, run.view.run_id, intent.position, attempt)
                if self.stream is not None and intent.kind == "model"
                else None
            )
            with deltas_to(sink) if sink is not None else contextlib.nullcontext():
                outcome = completed(
                    intent,
                    await attempt_once(self.versions.of(run), intent, self.pool, beats, sink),
                    attempt,
                    started,
                )
            if held is not None and self.gate is not None:
                self.gate.settle(held, intent, outcome)
            if stagemarks.ON:
                stagemarks.mark(f"call end {intent.kind}", run.view.run_id, intent.position)
        except (asyncio.CancelledError, Exception) as error:  # the span ends; the error goes on
            if span is not None:
                self.spans.call_failed(span, error)
            raise
        finally:
            if held is not None:
                held.release()
        elapsed = time.perf_counter() - started
        if span is not None:
            self.spans.call_completed(span, outcome)
        return outcome, elapsed

    def _heartbeats(self, owned: OwnedPartition, run: RunInstance, intent: Intent, attempt: int) -> CallBeats:
        """A tool attempt's heartbeats (runtime.worker.heartbeats): their records go to the run
        like the call's other records, while it is running here."""

        def deliver(event: ToolCallHeartbeat) -> None:
            if self._recordable(owned, run):
                self.flush(owned, run, run.activate(Deliver(event)))

        timeout = self.versions.of(run).tools[intent.name].heartbeat_timeout
        loop = asyncio.get_running_loop()
        return CallBeats(
            loop, intent.name, intent.position, attempt, intent.heartbeat, deliver, owned.stamp.clock, timeout
        )

    @staticmethod
    def _recordable(owned: OwnedPartition, run: RunInstance) -> bool:
        """Nothing more is done for a run that ended, or on a partition lost, meanwhile. (Nor is an
        outcome recorded before its Scheduled record is durable: ``_acked`` first, where it is
        pending -- a plain check, not a coroutine, as it is on every call's path.)"""
        return not owned.lost and run.view.active

    async def _record_failure(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        intent: Intent,
        ack: _SchedulingAck,
        failure: Event,
        elapsed: float,
        final: bool,
    ) -> bool:
        """Record a failed attempt (an outcome too); False if it could not be."""
        if ack.pending is not None and not await self._acked(run, intent, ack):
            return False
        if not self._recordable(owned, run):
            return False
        self.metrics.call(run.view.workflow, intent.kind, intent.name, False, elapsed, final)
        self.flush(owned, run, run.activate(Deliver(failure)), effect_outcome=intent.effect)
        return True

    async def _record_result(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        intent: Intent,
        ack: _SchedulingAck,
        outcome: ModelCallCompleted | ToolCallCompleted,
        elapsed: float,
    ) -> None:
        """Record a completed call; a result over the inline limit is stored out of line first and
        its record points at it (the run is given the value itself)."""
        if ack.pending is not None and not await self._acked(run, intent, ack):
            return
        if not self._recordable(owned, run):
            return
        self.metrics.call(run.view.workflow, intent.kind, intent.name, True, elapsed, True)
        text: str | None = None
        if len(outcome.result) > self.settings.payload_inline_limit:  # chars <= bytes: cheap first
            data = outcome.result.encode()
            if len(data) > self.settings.payload_inline_limit:
                offset = await self._store_payload(owned, run.view.run_id, data)
                if offset is None or owned.lost or not run.view.active:
                    return
                text, outcome = outcome.result, outlined(outcome, offset, data)
        self.flush(owned, run, run.activate(Deliver(outcome, text)), effect_outcome=intent.effect)

    def _store_blobs(
        self, owned: OwnedPartition, run_id: str, blobs: Mapping[str, bytes], events: list[Event]
    ) -> list[Event] | None:
        """Append the messages a run stores out of line to the payloads topic (the run's partition)
        and wait for their acks, then point ``events`` at their offsets. Rare (a message over the
        record budget) and synchronous, so the records keep their order; a blob that is not
        acknowledged stops the worker (None) before any record points at it."""
        offsets: dict[str, int] = {}
        key = run_id.encode()
        for sha, data in blobs.items():
            try:
                offsets[sha] = self.log.append(
                    self.settings.payloads_topic, owned.partition, key, self._sealed(run_id, data)
                ).result(timeout=BLOB_ACK_TIMEOUT)
            except (WriteError, TimeoutError) as error:
                self._fail(f"run {run_id}: a message stored out of line was not acknowledged: {error}")
                return None
        return [
            located(e, owned.partition, offsets) if isinstance(e, ModelCallScheduled) else e for e in events
        ]

    def _sealed(self, run_id: str, data: bytes) -> bytes:
        """A payloads-topic value sealed like the run's content fields (``Settings.seal_contents``);
        its event keeps the sha256 of the plain text, which the reader checks once it has opened it."""
        sealer = self.batcher.serde.sealer
        if sealer is None:
            return data
        return sealer.seal_text(data.decode("utf-8"), "payload", run_id).encode("ascii")

    async def _store_payload(self, owned: OwnedPartition, run_id: str, data: bytes) -> int | None:
        """Append a large result to the payloads topic (the run's partition); its offset once
        acknowledged -- before the event that points at it is appended. None if it was not
        acknowledged: the worker then stops, and the call is in doubt on restart."""
        loop = asyncio.get_running_loop()
        stored: asyncio.Future[int] = loop.create_future()
        records: list[tuple[bytes | None, bytes]] = [(run_id.encode(), self._sealed(run_id, data))]
        self.log.append_batch(loop, self.settings.payloads_topic, owned.partition, records, {0: stored})
        try:
            return await stored
        except WriteError as error:
            self.failure = self.failure or str(error)
            return None

    async def _wait_timer(self, owned: OwnedPartition, run: RunInstance, intent: Intent) -> None:
        # A loop timer holding the run id, not the run (runtime.worker.run_cache): a run waiting days
        # holds no thread, and may be evicted meanwhile. One fired already (a wake's re-issue) is not armed.
        if not intent.future.done:
            self.runs.arm(owned, run.view.run_id, intent.position, intent.fire_at)


class _SchedulingAck:
    """The ack of an intent's Scheduled record, awaited at most once: ``pending`` until then,
    ``offset`` after (None if nothing was appended with the intent, as for an in-doubt re-run)."""

    __slots__ = ("offset", "pending")

    def __init__(self, pending: asyncio.Future[int] | None) -> None:
        self.pending = pending
        self.offset: int | None = None


def _behind_effect(owned: OwnedPartition, run_id: str) -> bool:
    """Whether the run's latest effect outcome may not be durable yet. A call that started before
    it is acked could outlive it at a crash: the successor would then run the effect again (in doubt,
    with its key) although it had finished, and not the call in flight. Acks come in partition order,
    so the call's own Scheduled ack, awaited first, vouches for that outcome too."""
    pending = owned.effect_outcomes.get(run_id)
    if pending is None:
        return False
    if pending.done():
        del owned.effect_outcomes[run_id]
        return False
    return True
