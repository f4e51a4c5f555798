"""The state machine of one run: drives workflow code and matches it against history.

Everything outside this package drives it through one door, :meth:`RunMachine.activate`
(runtime.workflow.activation): an activation in, a completion out.

The same code path serves live execution and replay. A :class:`Wake` with the recorded history
replays it: every command the code issues is compared, at issue time, with the record history
holds at the same position (kind, name and the hash of the canonical arguments) -- the first
difference parks the run. Results are then applied in log order, resuming the coroutine
exactly where it was resumed when the run was live. When history runs out
(:meth:`RunMachine.finish_replay`) the machine goes live: commands history never saw get
their ``...Scheduled`` records, and a call that was scheduled but has no result -- the one in
flight at the crash -- is re-executed and marked in doubt.

The machine never does I/O. Each activation's completion holds the stamped events to append
and the intents the worker must carry out; the worker appends the events in order and executes
an intent only once its record is durable.

Two pure helpers keep it to that one job: :mod:`runtime.workflow.scheduling` says what each ctx call
issues and which record schedules it, :mod:`runtime.workflow.stepping` resumes the coroutine once
and says what its ending means as a record. The context the workflow sees
(:mod:`runtime.workflow.context`) knows the machine only as the ``RunHost`` protocol it defines, the
saga (:mod:`runtime.workflow.compensation`) only as its ``Compensator``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from runtime.config import Settings
from runtime.errors import AgentlogError, CallFailed, NonDeterminismError
from runtime.log.records.events import (
    ChildRunEnded,
    ChildRunScheduled,
    ChildRunSignalled,
    EpochClaimed,
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    NonDeterminismDetected,
    PartitionCheckpoint,
    PatchRecorded,
    PermitAwaited,
    PermitGranted,
    PromptDrifted,
    Redecided,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunRejected,
    RunStarted,
    SignalReceived,
    TimerFired,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallHeartbeat,
    ToolCallScheduled,
)
from runtime.log.records.prompts import PromptBook
from runtime.log.records.responses import full_text, full_value
from runtime.log.records.status import RunState, status_after
from runtime.workflow.activation import (
    NO_BLOBS,
    Activation,
    Cancel,
    Completion,
    Deliver,
    Fail,
    Park,
    RunView,
    TimerDue,
    Wake,
)
from runtime.workflow.app import App
from runtime.workflow.budget import Budget, Spend, call_spend
from runtime.workflow.cancellation import RunCancelledError, cancelled_ending, in_flight, stopped
from runtime.workflow.canonical import canonical_json
from runtime.workflow.children import ChildHandle, child_command, child_intent, resolve
from runtime.workflow.children import signal_intent as child_signal_intent
from runtime.workflow.compensation import CANCEL_SIGNAL, Saga, cancelled_by
from runtime.workflow.context import Context
from runtime.workflow.deadlines import DEADLINE_POSITION, deadline_intent
from runtime.workflow.deadlines import reason as deadline_reason
from runtime.workflow.declared_limits import run_limit_keys
from runtime.workflow.exposed import Exposed
from runtime.workflow.futures import DurableFuture, GatherFuture
from runtime.workflow.input_shape import coerce_input
from runtime.workflow.intents import (
    Drift,
    InDoubt,
    Intent,
    Stamp,
    describe_record,
    record_signature,
    with_envelope,
)
from runtime.workflow.retry_trail import note_failure
from runtime.workflow.scheduling import (
    drift_record,
    model_intent,
    patch_intent,
    prompt_drift,
    scheduled_record,
    signal_intent,
    timer_intent,
    tool_intent,
)
from runtime.workflow.stepping import Ended, step
from runtime.workflow.whatif_change import WhatifChange

E = TypeVar("E", bound=Event)
SCHEDULED_TYPES = (
    ModelCallScheduled,
    ToolCallScheduled,
    TimerScheduled,
    PatchRecorded,
    ChildRunScheduled,
    ChildRunSignalled,
)
# ctx.history_near_limit(): the warn threshold of Settings unless the worker passes its own.
HISTORY_WARN_EVENTS: int = Settings.model_fields["history_warn_events"].default


class RunMachine:
    """One run's workflow coroutine, its commands and their results."""

    def __init__(
        self,
        app: App,
        started: RunStarted,
        stamp: Stamp,
        history_warn_events: int = HISTORY_WARN_EVENTS,
    ) -> None:
        spec = app.workflows.get(started.workflow)
        if spec is None:
            raise AgentlogError(f"workflow {started.workflow!r} is not registered")
        self.app = app
        self.run_id = started.run_id
        # A reset run derives its effect keys from the original run: an effect it repeats keeps
        # its key, so the service it calls applies it once.
        self.key_root = started.key_root or started.run_id
        # A fork (agentlog fork): what the workflow sees as ctx.overrides, and effects run dry.
        # A what-if's fork is dry whatever its submission says: a what-if never acts.
        self.dry_run = started.fork_overrides is not None or started.whatif is not None
        self.overrides: dict[str, Any] = json.loads(started.fork_overrides) if started.fork_overrides else {}
        # A what-if's change (agentlog whatif): applied to model calls from the fork position on.
        self.whatif = WhatifChange.from_json(started.whatif_change) if started.whatif_change else None
        self.fork_position = started.reset_position
        self.workflow = started.workflow
        self.stamp = stamp
        self.seq = started.seq
        self.now_ms = started.occurred_at
        # The seq of the event that last resumed the workflow (like now_ms): replay sees the same.
        self.resumed_seq = started.seq
        self.history_warn_events = history_warn_events
        self.status: RunState = "running"
        self.outbox: list[Event] = []
        self.ready: list[Intent] = []
        self.commands: dict[int, Intent] = {}
        self.in_doubt: list[InDoubt] = []
        self.result: Any = None
        self.divergence: NonDeterminismError | None = None
        self.drift: list[Drift] = []  # model calls served from history under a changed prompt
        self.old_patches: list[str] = []  # patch ids whose old branch this run keeps (recorded before)
        # A budgeted run's spending as its record holds it (the worker checks it before a model call).
        self.spend = Spend(Budget.from_json(started.budget)) if started.budget else None
        self.parent_run_id = started.child_of  # a child run's parent (runtime.workflow.children)
        self._children: dict[str, Intent] = {}  # child run id -> the command that started it
        self.exposed = Exposed()  # ctx.expose's values, grown in place like spend (runtime.workflow.exposed)
        self._position = 0
        self._identical: Counter[str] = Counter()
        self._signals: dict[str, deque[str]] = {}
        self._waiters: dict[str, deque[Intent]] = {}
        self._blocked_on: DurableFuture | GatherFuture | None = None
        self._pending_terminal: Event | None = None
        # What the recorded history holds, filled by ``begin`` before the code first runs.
        self._history_records: dict[int, Event] = {}
        # The run's message sequence (runtime.log.records.prompts): a live call records only what is new.
        self._prompts = PromptBook()
        # Messages a live call stores out of line (sha256 -> canonical JSON), handed out with the
        # records that point at them (Completion.blobs).
        self.blobs: dict[str, bytes] = {}
        self._redecided_in_history: set[int] = set()
        # (position, issued args hash): a replay meeting the same drift again records nothing.
        self._drift_in_history: set[tuple[int, str]] = set()
        self._after_replay: list[Event] = []  # emitted during replay: stamped once history is done
        self.replaying = False
        self._woken = False
        # Calls waiting for a limit's permit (PermitAwaited, no PermitGranted yet): not in doubt.
        self._awaiting_permit: set[int] = set()
        self._signal_waits: list[tuple[int, str]] = []  # begun live, unrecorded (Completion.signal_waits)
        run_input = json.loads(started.input)
        # The run's key of each limit keyed by a field of its input (app.limit(per=...)), once.
        self.limit_keys = run_limit_keys(app.limits, run_input) if app.limits else ()
        # The run as the worker sees it, as of its last activation: a plain attribute (the protocol's
        # read-only ``view``), read on every call's path; replaced only when one of its fields changes.
        self.view = RunView(
            self.run_id,
            self.workflow,
            self.dry_run,
            self.status,
            spend=self.spend,
            limit_keys=self.limit_keys,
            parent_run_id=self.parent_run_id,
            exposed=self.exposed,
        )
        self._ctx = Context(self)
        self.saga = Saga()  # compensations registered by ctx.tool(..., compensate_with=...)
        # A cancel (runtime.workflow.cancellation): its ending once one was applied, the error to raise
        # at the workflow's await; the run's deadline (runtime.workflow.deadlines) and its start's offset.
        self.cancelled: RunCancelled | None = None
        self._throw: BaseException | None = None
        self.deadline = started.deadline
        self._start_offset = started.command_offset
        self._coro: Coroutine[Any, Any, Any] = spec.fn(self._ctx, coerce_input(spec.input_type, run_input))

    # ----------------------------------------------------------------------------- the door
    def activate(self, activation: Activation) -> Completion:
        """Hand the run one activation (runtime.workflow.activation); what it produced."""
        _ACTIVATE[type(activation)](self, activation)
        records, intents = self.drain()
        blobs: Mapping[str, bytes] = NO_BLOBS
        if self.blobs:
            blobs, self.blobs = self.blobs, {}
        waits: tuple[tuple[int, str], ...] = ()
        if self._signal_waits:
            waits, self._signal_waits = tuple(self._signal_waits), []
        return Completion(records, intents, blobs, self._refreshed_view(), waits)

    def _refreshed_view(self) -> RunView:
        """A new view only when something in it changed (a few times in a run): a step allocates none."""
        view = self.view
        if (
            view.status != self.status
            or view.result is not self.result
            or view.divergence is not self.divergence
            or len(view.in_doubt) != len(self.in_doubt)
            or len(view.drift) != len(self.drift)
            or len(view.old_patches) != len(self.old_patches)
        ):
            view = self.view = RunView(
                self.run_id,
                self.workflow,
                self.dry_run,
                self.status,
                self.result,
                tuple(self.in_doubt),
                tuple(self.drift),
                self.divergence,
                tuple(self.old_patches),
                self.spend,
                limit_keys=self.limit_keys,
                parent_run_id=self.parent_run_id,
                exposed=self.exposed,
            )
        return view

    def waiting(self) -> bool:
        """True if all the run waits for is timers or signals: one lookup per future it waits on, not
        a walk of the run's commands (a scrape must stay cheap under thousands of long runs)."""
        blocked = self._blocked_on
        if blocked is None:
            return False
        futures = blocked.children if isinstance(blocked, GatherFuture) else (blocked,)
        commands = self.commands
        waits = False  # asked at every step (runtime.worker.run_cache): no list, no generator
        for future in futures:
            command = None if future.done else commands.get(future.position)
            if command is not None:
                if command.kind not in ("timer", "signal", "child"):
                    return False
                waits = True
        return waits

    def timers(self) -> tuple[tuple[int, int], ...]:
        """(position, fire_at) of each recorded timer or signal timeout the run still waits for."""
        timers = tuple(
            (position, command.fire_at)
            for position, command in self.commands.items()
            if command.kind in ("timer", "signal") and command.recorded and not command.future.done
        )
        if self.deadline is not None and self.cancelled is None and self.active:
            timers += ((DEADLINE_POSITION, self.deadline),)
        return timers

    def open_children(self) -> tuple[tuple[str, str], ...]:
        """(child run id, parent_close policy) of each child the run started that has not ended."""
        return tuple(
            (run_id, command.args["parent_close"])
            for run_id, command in self._children.items()
            if not command.future.done
        )

    def close(self) -> None:
        """Let the run go from memory (a run cache evicts it): GeneratorExit into the workflow
        coroutine, so whatever it holds (a framework's agent loop) is freed now. Its history stays
        the truth: a wake is a new run replayed from it (``new_run``)."""
        # RuntimeError: code that awaits in a ``finally``; nothing is left to free but the frame.
        with contextlib.suppress(RuntimeError):
            self._coro.close()
        self._blocked_on = None
        # The context points back at the machine: without this cycle, the run is freed when the
        # cache drops it, not at the next full collection (which a worker runs rarely: loop.py).
        del self._ctx

    def _wake(self, wake: Wake) -> None:
        if self._woken:  # a run evicted and woken again is a new one (new_run), replayed from its history
            raise AgentlogError(f"run {self.run_id} is in memory already: a run is woken once")
        self._woken = True
        if wake.history:
            self.begin(wake.history)
            self.replay(wake.history)
            if wake.go_live:
                self.finish_replay()
            else:
                self._end_offline()
        else:
            self.begin()
        if wake.go_live and self.active and self.deadline is not None and self.cancelled is None:
            self.ready.append(deadline_intent(self.deadline))  # armed by the worker like a timer

    def _deliver(self, deliver: Deliver) -> None:
        event = deliver.event
        if isinstance(event, ChildRunEnded):  # the command names the child; the run knows its position
            command = child_command(self._children, event.child_run_id)
            if command is None or command.future.done or not self.active:
                return  # a repeated ending (sent again after a crash): recorded once
            event = dataclasses.replace(event, position=command.position)
        self.record(event, deliver.result_text)

    def _timer_due(self, due: TimerDue) -> None:
        if due.position == DEADLINE_POSITION:  # the run's deadline: cancelled, once
            if self.deadline is not None and self.cancelled is None:
                self.cancel(deadline_reason(self.deadline), self._start_offset)
            return
        if self._wants_timer(due.position):
            self.record(TimerFired(run_id=self.run_id, position=due.position))

    def _cancel(self, cancel: Cancel) -> None:
        self.cancel(cancel.reason, cancel.command_offset)

    def _park(self, park: Park) -> None:
        self.park(park.reason)

    def _fail(self, fail: Fail) -> None:
        if self.active:
            failed = RunFailed(run_id=self.run_id, error_type=fail.error_type, error=fail.error)
            self._emit(failed)
            self._terminate(failed)

    # ----------------------------------------------------------------------------- lifecycle
    # The steps an activation takes; the machine's own tests drive them one by one.
    def begin(self, history: Sequence[Event] = ()) -> None:
        """Run the workflow until it first blocks; with ``history`` (the run's records, RunStarted
        first), every command it issues is matched against the record at its position."""
        if history:
            self._history_records = {e.position: e for e in history if isinstance(e, SCHEDULED_TYPES)}
            self._prompts.learn_history(history)
            self._redecided_in_history = {e.position for e in history if isinstance(e, Redecided)}
            self._drift_in_history = {
                (e.position, e.issued_args_hash) for e in history if isinstance(e, PromptDrifted)
            }
            self.replaying = True
        self._drive()

    def replay(self, history: Sequence[Event]) -> None:
        """Apply recorded events after RunStarted, in log order."""
        for event in history:
            if isinstance(event, RunStarted) or not self.active:
                continue
            self.apply(event)

    def finish_replay(self) -> None:
        """History is exhausted: go live. Unrecorded commands get records; in-flight calls re-run."""
        self.replaying = False
        for event in self._after_replay:
            self._emit(event)
        self._after_replay = []
        if not self.active:
            return
        for position, record in sorted(self._history_records.items()):
            if position not in self.commands:
                self._diverge(position, describe_record(record), "nothing (the code did not reach it)")
                return
        if self._pending_terminal is not None:
            terminal, self._pending_terminal = self._pending_terminal, None
            self._finish(terminal)
            return
        for position in sorted(self.commands):
            command = self.commands[position]
            if command.future.done or not command.recorded:
                continue
            if position in self._history_records:
                # A call that was waiting for a permit never started: it waits again, not in doubt.
                if command.kind in ("model", "tool") and position not in self._awaiting_permit:
                    command.in_doubt = True
                    self.in_doubt.append(InDoubt(command.kind, command.name, position, command.key))
                self.ready.append(command)  # timers are re-armed with their recorded fire_at
            else:
                self._record(command)

    def _end_offline(self) -> None:
        """History is exhausted and the run stays offline (the replayer): the first recorded command
        the code did not reach is the divergence; nothing is issued or parked."""
        self.replaying = False
        if self.divergence is not None:
            return
        unreached = sorted(p for p in self._history_records if p not in self.commands)
        if unreached:
            self.divergence = NonDeterminismError(
                self.run_id, unreached[0], "a recorded command", "nothing (the code did not reach it)"
            )

    @property
    def active(self) -> bool:
        return self.status == "running"

    def drain(self) -> tuple[list[Event], list[Intent]]:
        """What the run produced since the last drain: the records to append, the intents to carry out."""
        events, ready = self.outbox, self.ready
        self.outbox, self.ready = [], []
        return events, ready

    # ----------------------------------------------------------------------------- events in
    def record(self, event: E, result_text: str | None = None) -> E:
        """Live: stamp an inbound event (a result, a timer, a signal), apply it, queue it to append.
        ``result_text``: the result of a ``...Completed`` event that points at it stored out of
        line (runtime.log.records.payloads) -- the log gets the pointer, the workflow the value."""
        stamped = self._stamp(event)
        self.outbox.append(stamped)
        applied: Event = stamped
        if result_text is not None and isinstance(stamped, (ModelCallCompleted, ToolCallCompleted)):
            applied = dataclasses.replace(stamped, result=result_text, result_offset=None)
        elif isinstance(stamped, ModelCallCompleted):  # inline in the log: the next request may edit it
            self._prompts.saw_result(stamped.position, full_text(stamped))
        self.apply(applied)
        return stamped

    def apply(self, event: Event) -> None:
        """Apply one event of the run's log: the handler for its record type (``_APPLY``)."""
        self.seq = max(self.seq, event.seq)
        _APPLY[type(event)](self, event)

    # Each handler applies one kind of record. A record that answers a command resumes the
    # workflow at the time and seq it was written (``_resumed_by``), as it did live.
    def _matched_at_issue(self, event: Event) -> None:
        """A ``...Scheduled`` or patch record: matched when the code issued the command (``_issue``)."""

    def _resumed_by(self, event: Event) -> None:
        self.now_ms = event.occurred_at
        self.resumed_seq = event.seq

    def _apply_completed(self, event: ModelCallCompleted | ToolCallCompleted) -> None:
        self._resumed_by(event)
        if event.result_offset is not None:
            raise AgentlogError(
                f"run {self.run_id}: the result at position {event.position} is stored out of line "
                f"(payloads offset {event.result_offset}) and was not read back; a saved history "
                "needs `agentlog history --json --payloads`"
            )
        command = self._command_for(event.position, event)
        if command is None:
            return
        if self.spend is not None and isinstance(event, ModelCallCompleted):
            self.spend.add(call_spend(event, command))
        # Written by canonical_json; a framework response recorded short is read back whole.
        value = full_value(event) if isinstance(event, ModelCallCompleted) else orjson.loads(event.result)
        command.future.set_result(value)
        if event.in_doubt and self.replaying:  # live re-executions were listed by finish_replay
            self.in_doubt.append(InDoubt(command.kind, command.name, command.position, command.key))
        self._drive()

    def _apply_failed(self, event: ModelCallFailed | ToolCallFailed) -> None:
        self._resumed_by(event)
        command = self._command_for(event.position, event)
        if command is None:
            return
        command.failed_attempts = max(command.failed_attempts, event.attempt)
        note_failure(command, event)
        if event.final:
            command.future.set_exception(
                CallFailed(
                    command.kind, command.name, command.position, event.error_type, event.error, event.attempt
                )
            )
        self._drive()

    def _apply_timer_fired(self, event: TimerFired) -> None:
        self._resumed_by(event)
        command = self._command_for(event.position, event)
        if command is None:
            return
        if command.kind == "timer":
            command.future.set_result(None)
        elif not command.future.done:  # a signal wait's timeout
            self._waiters.get(command.name, deque()).remove(command)
            command.future.set_exception(
                TimeoutError(f"no signal {command.name!r} within {command.duration_ms} ms")
            )
        self._drive()

    def _apply_signal(self, event: SignalReceived) -> None:
        self._resumed_by(event)
        if event.name == CANCEL_SIGNAL:
            self._cancel_now(cancelled_by(event.payload, event.command_offset, self.run_id))
        else:
            waiters = self._waiters.get(event.name)
            if waiters:
                waiters.popleft().future.set_result(json.loads(event.payload))
            else:
                self._signals.setdefault(event.name, deque()).append(event.payload)
        self._drive()

    def _apply_child_ended(self, event: ChildRunEnded) -> None:
        self._resumed_by(event)
        command = self._command_for(event.position, event)
        if command is None:
            return
        resolve(command, event, self.spend)
        self._drive()

    def _apply_ending(self, event: Event) -> None:
        self._resumed_by(event)
        self._terminate(event)

    def _apply_note(self, event: Event) -> None:
        """A divergence, re-decision or drift already recorded: it changes nothing in the run."""
        self._resumed_by(event)

    def _apply_permit(self, event: PermitAwaited | PermitGranted) -> None:
        """A call's wait for a permit began or ended: nothing resumes; a call still waiting when
        history ends never started (``finish_replay`` runs it again, not in doubt)."""
        if isinstance(event, PermitAwaited):
            self._awaiting_permit.add(event.position)
        else:
            self._awaiting_permit.discard(event.position)

    def _apply_heartbeat(self, event: ToolCallHeartbeat) -> None:
        """A tool call's progress: it decides nothing and resumes nothing (wherever it falls); the
        call's next attempt reads the last details back (runtime.worker.heartbeats)."""
        command = self.commands.get(event.position)
        if command is not None:
            command.heartbeat = event.details

    def _apply_other(self, event: Event) -> None:
        """A record no command waits for (RunStarted, a claim, a checkpoint, a rejection)."""
        self._resumed_by(event)
        self._drive()

    def _command_for(self, position: int, event: Event) -> Intent | None:
        command = self.commands.get(position)
        if command is None:
            self._diverge(position, event.type, "nothing (the code did not reach it)")
        return command

    def _wants_timer(self, position: int) -> bool:
        command = self.commands.get(position)
        return command is not None and self.active and not command.future.done

    # ----------------------------------------------------------------------------- commands out
    def overrides_now(self) -> dict[str, Any]:
        """A fork's overrides once the code has reached the fork position: before it the fork
        replays the original's history, which the original code issued without them."""
        return dict(self.overrides) if self._position + 1 >= self.fork_position else {}

    def _next_position(self) -> int:
        self._position += 1
        return self._position

    def issue_model(
        self, name: str, messages: list[dict[str, Any]], params: dict[str, Any], prompt_version: str | None
    ) -> DurableFuture:
        if self.whatif is not None and self._position + 1 >= self.fork_position:
            name, messages = self.whatif.applied(name, messages)
        command = model_intent(
            self.app, self._next_position, name, messages, params, prompt_version, self.key_root
        )
        return self._issue(command)

    def issue_tool(
        self, name: str, args: dict[str, Any], *, key: str | None = None, compensates: int | None = None
    ) -> DurableFuture:
        """``key``, ``compensates``: a compensation's (runtime.workflow.compensation)."""
        command = tool_intent(
            self.app,
            self._next_position,
            name,
            args,
            self.key_root,
            self._identical,
            key=key,
            compensates=compensates,
        )
        return self._issue(command)

    def issue_compensable_tool(
        self, name: str, args: dict[str, Any], compensate_with: tuple[str, dict[str, Any]]
    ) -> DurableFuture:
        compensation = self.saga.checked(self.app, name, compensate_with)
        future = self.issue_tool(name, args)
        self.saga.add(future, name, compensation)
        return future

    def effect_key(self, position: int) -> str:
        key = self.commands[position].key
        assert key is not None  # an effect's key, recorded with it
        return key

    def issue_timer(self, duration_ms: int) -> DurableFuture:
        return self._issue(timer_intent(self._next_position(), duration_ms))

    def issue_signal_wait(self, name: str, timeout_ms: int | None) -> DurableFuture:
        command = signal_intent(self._next_position(), name, timeout_ms)
        buffered = self._signals.get(name)
        if buffered:
            # Already here: resolved at once, on replay too (the buffer is rebuilt in the same order).
            command.future.set_result(json.loads(buffered.popleft()))
            command.recorded = False
            self.commands[command.position] = command
            return command.future
        self._waiters.setdefault(name, deque()).append(command)
        if not command.recorded and not self.replaying:
            self._signal_waits.append((command.position, name))
        return self._issue(command)

    def issue_child(self, workflow: str, input: Any, parent_close: str) -> ChildHandle:
        command = child_intent(
            self.app, self._next_position, self.run_id, workflow, input, parent_close, self
        )
        assert command.key is not None and isinstance(command.future, ChildHandle)
        self._children[command.key] = command
        self._issue(command)
        return command.future

    def issue_child_signal(self, handle: ChildHandle, name: str, payload: Any, cancel: bool) -> DurableFuture:
        return self._issue(child_signal_intent(self._next_position(), handle, name, payload, cancel))

    def patched(self, change_id: str) -> bool:
        position = self._position + 1
        recorded = self._history_records.get(position)
        if recorded is not None and not (
            isinstance(recorded, PatchRecorded) and recorded.patch_id == change_id
        ):
            self.old_patches.append(change_id)
            return False  # recorded before the patch: keep the old code path, use no position
        self._next_position()
        self._issue(patch_intent(position, change_id))
        return True

    def _issue(self, command: Intent) -> DurableFuture:
        self.commands[command.position] = command
        if not command.recorded or self.divergence is not None:
            return command.future
        recorded = self._history_records.get(command.position)
        if recorded is not None:
            if self._prompt_drift(recorded, command):
                pass  # matched by kind and name: the recorded decision is served
            elif not self._same_command(recorded, command):
                self._diverge(command.position, describe_record(recorded), command.describe())
            elif isinstance(recorded, TimerScheduled):
                command.fire_at = recorded.fire_at
            elif isinstance(recorded, ToolCallScheduled):
                command.key = recorded.idempotency_key  # a retry reuses the recorded key
        elif not self.replaying:
            self._record(command)
        return command.future

    @staticmethod
    def _same_command(recorded: Event, command: Intent) -> bool:
        kind, name, digest = record_signature(recorded)
        return (kind, name) == (command.kind, command.name) and command.matches(digest)

    def _prompt_drift(self, recorded: Event, command: Intent) -> bool:
        """A model call whose record names the same model but another args hash: drift to record,
        not a divergence -- unless the app asked for ``strict_prompts``. Recorded once per
        (position, issued hash): a later replay of a history that holds the PromptDrifted record
        finds it and records nothing."""
        drift = None if self.app.strict_prompts else prompt_drift(recorded, command)
        if drift is None:
            return False
        self.drift.append(drift)
        if (drift.position, drift.issued_args_hash) in self._drift_in_history:
            return True
        self._drift_in_history.add((drift.position, drift.issued_args_hash))
        if self.replaying:
            # its seq must follow the recorded events'
            self._after_replay.append(drift_record(self.run_id, drift))
        else:
            self._emit(drift_record(self.run_id, drift))
        return True

    def _record(self, command: Intent) -> None:
        """Live: emit the command's record; calls and timers then wait in ``ready`` for durability."""
        self._emit(scheduled_record(command, self.run_id, self._prompts, self.blobs, self.stamp.clock))
        if command.kind != "patch":
            self.ready.append(command)

    # ----------------------------------------------------------------------------- driving
    def _drive(self) -> None:
        while self.active and self.divergence is None:
            throw = self._throw
            if throw is None:
                if self._blocked_on is not None and not self._blocked_on.done:
                    return
                stepped = step(self._coro, self.run_id, self.seq)
            else:  # a cancel, raised at the workflow's await
                self._throw = None
                stepped = step(self._coro, self.run_id, self.seq, throw)
            if isinstance(stepped, Ended):
                if self.cancelled is not None and not self.saga.unwinding:
                    ending = cancelled_ending(self.cancelled, stepped.record)
                    if not isinstance(ending, RunCancelled) or not self._begin_unwind(ending):
                        self._finish(ending)
                        return
                    continue
                if (
                    stepped.raised
                    and isinstance(stepped.record, RunFailed)
                    and self._begin_unwind(stepped.record)
                ):
                    continue
                if isinstance(stepped.record, RunCompleted):
                    self.result = stepped.value
                self._finish(stepped.record)
                return
            self._blocked_on = stepped
        if self.divergence is not None and self.active:
            self._park_divergence()

    def _finish(self, event: Event) -> None:
        if self.replaying:
            self._pending_terminal = event  # history may already hold it; finish_replay decides
            return
        self._emit(event)
        self._terminate(event)

    def _terminate(self, event: Event) -> None:
        self.status = status_after(event.type, self.status)
        self._pending_terminal = None
        self._coro.close()

    def cancel(self, reason: str, command_offset: int) -> Event | None:
        """Record the cancel (runtime.workflow.cancellation) and apply it: the calls in flight are
        stopped, the workflow sees RunCancelledError at its await; nothing if the run has ended."""
        if not self.active:
            return None
        signal = SignalReceived(
            run_id=self.run_id, name=CANCEL_SIGNAL, payload=json.dumps(reason), command_offset=command_offset
        )
        return self.record(signal)

    def _cancel_now(self, ending: RunCancelled) -> None:
        """Apply a recorded cancel: stop the calls in flight (their failures recorded live, found in
        history on replay), then raise at the workflow's await -- or, a second cancel, stop its cleanup."""
        if self.saga.unwinding:  # the compensations run already: the run ends as it was going to
            return
        for position in in_flight(self.commands):
            command = self.commands[position]
            failure = stopped(command, ending.reason, position not in self._awaiting_permit)
            command.future.set_exception(
                CallFailed(
                    command.kind, command.name, position, failure.error_type, failure.error, failure.attempt
                )
            )
            if failure.in_doubt:
                self.in_doubt.append(InDoubt(command.kind, command.name, position, command.key))
                self.saga.in_doubt.add(position)
            if not self.replaying:
                self._emit(failure)
        if self.cancelled is None:
            self.cancelled = ending
            self._throw = RunCancelledError(ending.reason)
        else:  # cancelled twice: the cleanup is cut short at its await, its end is the cancel's
            with contextlib.suppress(RuntimeError):
                self._coro.close()
            self._coro = _raising(RunCancelledError(self.cancelled.reason))
            self._blocked_on = None

    def _begin_unwind(self, ending: Event) -> bool:
        """Drive the saga's compensations in place of the workflow, then end with ``ending``
        (runtime.workflow.compensation); False if there is nothing to compensate."""
        if self.saga.unwinding or not self.saga.pending():
            return False
        self._coro.close()
        self._coro = self.saga.unwind(self, ending)
        self._blocked_on = None
        return True

    def park(self, reason: str) -> None:
        """Stop the run without failing it (an operator decides what happens next)."""
        if not self.active:
            return
        parked = RunParked(run_id=self.run_id, reason=reason, position=self._position)
        self._emit(parked)
        self._terminate(parked)

    def note_redecided(self, position: int, original: Any, check: Any, replacement: Any, reason: str) -> None:
        """Record a re-decide point's divergence -- once: a replay that reaches it again finds
        the record in history. During replay it waits for the end of history (its seq must
        follow the recorded events')."""
        if position in self._redecided_in_history:
            return
        self._redecided_in_history.add(position)
        event = Redecided(
            run_id=self.run_id,
            position=position,
            original=canonical_json(original),
            check=canonical_json(check),
            replacement=canonical_json(replacement),
            reason=reason,
        )
        if self.replaying:
            self._after_replay.append(event)
        else:
            self._emit(event)

    # ----------------------------------------------------------------------------- divergence
    def _diverge(self, position: int, expected: str, issued: str) -> None:
        if self.divergence is None:
            self.divergence = NonDeterminismError(self.run_id, position, expected, issued)

    def _park_divergence(self) -> None:
        error = self.divergence
        assert error is not None
        self.replaying = False
        self._emit(
            NonDeterminismDetected(
                run_id=self.run_id,
                position=error.position,
                expected=error.expected,
                issued=error.issued,
                message=str(error),
            )
        )
        parked = RunParked(run_id=self.run_id, reason=str(error), position=error.position)
        self._emit(parked)
        self._terminate(parked)

    def _emit(self, event: Event) -> None:
        self.outbox.append(self._stamp(event))

    def _stamp(self, event: E) -> E:
        self.seq += 1
        return with_envelope(
            event, self.run_id, self.seq, self.stamp.clock(), self.stamp.worker, self.stamp.epoch
        )


async def _raising(error: BaseException) -> None:
    raise error


# The handler of each kind of activation (runtime.workflow.activation).
_ACTIVATE: dict[type[Activation], Callable[[RunMachine, Any], None]] = {
    Wake: RunMachine._wake,
    Deliver: RunMachine._deliver,
    TimerDue: RunMachine._timer_due,
    Cancel: RunMachine._cancel,
    Park: RunMachine._park,
    Fail: RunMachine._fail,
}

# The handler of each event record type; tests/unit/test_machine_dispatch.py checks every one is here.
_APPLY: dict[type[Event], Callable[[RunMachine, Any], None]] = {
    **dict.fromkeys(SCHEDULED_TYPES, RunMachine._matched_at_issue),
    ModelCallCompleted: RunMachine._apply_completed,
    ToolCallCompleted: RunMachine._apply_completed,
    ModelCallFailed: RunMachine._apply_failed,
    ToolCallFailed: RunMachine._apply_failed,
    TimerFired: RunMachine._apply_timer_fired,
    PermitAwaited: RunMachine._apply_permit,
    PermitGranted: RunMachine._apply_permit,
    ToolCallHeartbeat: RunMachine._apply_heartbeat,
    SignalReceived: RunMachine._apply_signal,
    ChildRunEnded: RunMachine._apply_child_ended,
    **dict.fromkeys(
        (RunCompleted, RunFailed, RunCancelled, RunContinuedAsNew, RunParked), RunMachine._apply_ending
    ),
    **dict.fromkeys((NonDeterminismDetected, Redecided, PromptDrifted), RunMachine._apply_note),
    **dict.fromkeys((RunStarted, EpochClaimed, PartitionCheckpoint, RunRejected), RunMachine._apply_other),
}
