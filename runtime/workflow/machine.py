"""The state machine of one run: drives workflow code and matches it against history.

The same code path serves live execution and replay. Replay gets the whole recorded history
up front: every command the code issues is compared, at issue time, with the record history
holds at the same position (kind, name and the hash of the canonical arguments) -- the first
difference parks the run. Results are then applied in log order, resuming the coroutine
exactly where it was resumed when the run was live. When history runs out
(:meth:`RunMachine.finish_replay`) the machine goes live: commands history never saw get
their ``...Scheduled`` records, and a call that was scheduled but has no result -- the one in
flight at the crash -- is re-executed and marked in doubt.

The machine never does I/O. It emits stamped events into ``outbox`` and the commands the
worker must carry out into ``ready``; the worker appends the events in order and executes a
command only once its record is durable.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, deque
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import orjson

from runtime.config import Settings
from runtime.errors import AgentlogError, CallFailed, DecisionOutOfBounds, NonDeterminismError
from runtime.log.events import (
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    NonDeterminismDetected,
    PatchRecorded,
    PromptDrifted,
    Redecided,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunStarted,
    SignalReceived,
    TimerFired,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.log.prompts import PromptBook
from runtime.log.status import RunState, status_after
from runtime.workflow.app import App
from runtime.workflow.canonical import args_hash, canonical_json, idempotency_key, sha256_hex
from runtime.workflow.compensation import CANCEL_SIGNAL, Saga, Unwound, cancelled_by
from runtime.workflow.context import Context, ContinueAsNew
from runtime.workflow.futures import DurableFuture, GatherFuture
from runtime.workflow.input_shape import coerce_input
from runtime.workflow.intents import (
    Drift,
    InDoubt,
    Intent,
    Stamp,
    describe_record,
    record_signature,
    timer_hash,
    with_envelope,
)
from runtime.workflow.redact import redact

E = TypeVar("E", bound=Event)
SCHEDULED_TYPES = (ModelCallScheduled, ToolCallScheduled, TimerScheduled, PatchRecorded)
# ctx.history_near_limit(): the warn threshold of Settings unless the worker passes its own.
HISTORY_WARN_EVENTS: int = Settings.model_fields["history_warn_events"].default


class RunMachine:
    """One run's workflow coroutine, its commands and their results."""

    def __init__(
        self,
        app: App,
        started: RunStarted,
        stamp: Stamp,
        history: Sequence[Event] = (),
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
        self.dry_run = started.fork_overrides is not None
        self.overrides: dict[str, Any] = json.loads(started.fork_overrides) if started.fork_overrides else {}
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
        self._position = 0
        self._identical: Counter[str] = Counter()
        self._signals: dict[str, deque[str]] = {}
        self._waiters: dict[str, deque[Intent]] = {}
        self._blocked_on: DurableFuture | GatherFuture | None = None
        self._pending_terminal: Event | None = None
        self._history_records = {e.position: e for e in history if isinstance(e, SCHEDULED_TYPES)}
        # The run's message sequence (runtime.log.prompts): a live call records only what is new.
        self._prompts = PromptBook()
        # Messages a live call stores out of line (sha256 -> canonical JSON), taken by the worker
        # with ``drain_blobs`` before the records that point at them are appended.
        self.blobs: dict[str, bytes] = {}
        for event in history:
            if isinstance(event, ModelCallScheduled):
                self._prompts.learn(event)
        self._redecided_in_history = {e.position for e in history if isinstance(e, Redecided)}
        # (position, issued args hash): a replay meeting the same drift again records nothing.
        self._drift_in_history = {
            (e.position, e.issued_args_hash) for e in history if isinstance(e, PromptDrifted)
        }
        self._after_replay: list[Event] = []  # emitted during replay: stamped once history is done
        self.replaying = bool(history)
        self._ctx = Context(self)
        self.saga = Saga()  # compensations registered by ctx.tool(..., compensate_with=...)
        self._coro: Coroutine[Any, Any, Any] = spec.fn(
            self._ctx, coerce_input(spec.input_type, json.loads(started.input))
        )

    # ----------------------------------------------------------------------------- lifecycle
    def begin(self) -> None:
        """Run the workflow until it first blocks."""
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
                if command.kind in ("model", "tool"):
                    command.in_doubt = True
                    self.in_doubt.append(InDoubt(command.kind, command.name, position, command.key))
                self.ready.append(command)  # timers are re-armed with their recorded fire_at
            else:
                self._record(command)

    @property
    def active(self) -> bool:
        return self.status == "running"

    @property
    def blocked_on(self) -> DurableFuture | GatherFuture | None:
        """What the workflow waits for now (the worker's runs gauge: waiting or active)."""
        return self._blocked_on

    def drain(self) -> tuple[list[Event], list[Intent]]:
        events, ready = self.outbox, self.ready
        self.outbox, self.ready = [], []
        return events, ready

    # ----------------------------------------------------------------------------- events in
    def record(self, event: E, result_text: str | None = None) -> E:
        """Live: stamp an inbound event (a result, a timer, a signal), apply it, queue it to append.
        ``result_text``: the result of a ``...Completed`` event that points at it stored out of
        line (runtime.log.payloads) -- the log gets the pointer, the workflow the value."""
        stamped = self._stamp(event)
        self.outbox.append(stamped)
        applied: Event = stamped
        if result_text is not None and isinstance(stamped, (ModelCallCompleted, ToolCallCompleted)):
            applied = dataclasses.replace(stamped, result=result_text, result_offset=None)
        self.apply(applied)
        return stamped

    def apply(self, event: Event) -> None:
        self.seq = max(self.seq, event.seq)
        if isinstance(event, SCHEDULED_TYPES):
            self._apply_record(event)
            return
        self.now_ms = event.occurred_at
        self.resumed_seq = event.seq
        if isinstance(event, (ModelCallCompleted, ToolCallCompleted)):
            if event.result_offset is not None:
                raise AgentlogError(
                    f"run {self.run_id}: the result at position {event.position} is stored out of line "
                    f"(payloads offset {event.result_offset}) and was not read back; a saved history "
                    "needs `agentlog history --json --payloads`"
                )
            command = self._command_for(event.position, event)
            if command is None:
                return
            command.future.set_result(orjson.loads(event.result))  # written by canonical_json
            if event.in_doubt and self.replaying:  # live re-executions were listed by finish_replay
                self.in_doubt.append(InDoubt(command.kind, command.name, command.position, command.key))
        elif isinstance(event, (ModelCallFailed, ToolCallFailed)):
            command = self._command_for(event.position, event)
            if command is None:
                return
            command.failed_attempts = max(command.failed_attempts, event.attempt)
            if event.final:
                command.future.set_exception(
                    CallFailed(
                        command.kind,
                        command.name,
                        command.position,
                        event.error_type,
                        event.error,
                        event.attempt,
                    )
                )
        elif isinstance(event, TimerFired):
            command = self._command_for(event.position, event)
            if command is None:
                return
            if command.kind == "timer":
                command.future.set_result(None)
            elif not command.future.done:
                self._waiters.get(command.name, deque()).remove(command)
                command.future.set_exception(
                    TimeoutError(f"no signal {command.name!r} within {command.duration_ms} ms")
                )
        elif isinstance(event, SignalReceived) and event.name == CANCEL_SIGNAL:
            self._begin_unwind(cancelled_by(event.payload, event.command_offset, self.run_id))
        elif isinstance(event, SignalReceived):
            waiters = self._waiters.get(event.name)
            if waiters:
                waiters.popleft().future.set_result(json.loads(event.payload))
            else:
                self._signals.setdefault(event.name, deque()).append(event.payload)
        elif isinstance(event, (RunCompleted, RunFailed, RunCancelled, RunContinuedAsNew, RunParked)):
            self._terminate(event)
            return
        elif isinstance(event, (NonDeterminismDetected, Redecided, PromptDrifted)):
            return
        self._drive()

    def _apply_record(self, event: Event) -> None:
        # The match itself happened when the code issued the command (see _issue).
        return

    def _command_for(self, position: int, event: Event) -> Intent | None:
        command = self.commands.get(position)
        if command is None:
            self._diverge(position, event.type, "nothing (the code did not reach it)")
        return command

    def wants_timer(self, position: int) -> bool:
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
        if name not in self.app.models:
            raise AgentlogError(f"model {name!r} is not registered (known: {sorted(self.app.models)})")
        args = {"messages": messages, "params": params, "prompt_version": prompt_version}
        position = self._next_position()
        # Params are named (api_key, headers ...); messages are content, not scanned for names.
        recorded_params = redact(params, self.key_root)
        recorded = args if recorded_params is params else {**args, "params": recorded_params}
        command = Intent(
            position, "model", name, args, args_hash("model", name, recorded), DurableFuture(position)
        )
        command.prompt_version = prompt_version
        self._note_redaction(command, recorded)
        return self._issue(command)

    def _note_redaction(self, command: Intent, recorded: Any) -> None:
        command.recorded_args = recorded
        if recorded is not command.args:
            command.legacy_hash = args_hash(command.kind, command.name, command.args)

    def issue_tool(
        self, name: str, args: dict[str, Any], *, key: str | None = None, compensates: int | None = None
    ) -> DurableFuture:
        """``key``, ``compensates``: a compensation's (runtime.workflow.compensation)."""
        spec = self.app.tools.get(name)
        if spec is None:
            raise AgentlogError(f"tool {name!r} is not registered (known: {sorted(self.app.tools)})")
        position = self._next_position()
        recorded = redact(args, self.key_root, spec.redact)
        command = Intent(
            position, "tool", name, args, args_hash("tool", name, recorded), DurableFuture(position)
        )
        self._note_redaction(command, recorded)
        if spec.effect:
            # From the recorded (redacted) arguments: nothing in the log is derived from a secret.
            key_args = recorded if spec.key_args is None else {k: recorded.get(k) for k in spec.key_args}
            identity = f"{name}/{sha256_hex(canonical_json(key_args))}"
            command.effect = True
            command.key = key or idempotency_key(self.key_root, name, key_args, self._identical[identity])
            self._identical[identity] += 1
        command.compensates = compensates
        return self._issue(command)

    def issue_timer(self, duration_ms: int) -> DurableFuture:
        position = self._next_position()
        command = Intent(
            position,
            "timer",
            "sleep",
            duration_ms,
            timer_hash("timer", "sleep", duration_ms),
            DurableFuture(position),
        )
        command.duration_ms = duration_ms
        return self._issue(command)

    def issue_signal_wait(self, name: str, timeout_ms: int | None) -> DurableFuture:
        position = self._next_position()
        future = DurableFuture(position)
        buffered = self._signals.get(name)
        command = Intent(
            position, "signal", name, timeout_ms, timer_hash("signal", name, timeout_ms or 0), future
        )
        command.duration_ms = timeout_ms or 0
        if buffered:
            # Already here: resolved at once, on replay too (the buffer is rebuilt in the same order).
            future.set_result(json.loads(buffered.popleft()))
            command.recorded = False
            self.commands[position] = command
            return future
        self._waiters.setdefault(name, deque()).append(command)
        command.recorded = timeout_ms is not None
        return self._issue(command)

    def patched(self, change_id: str) -> bool:
        position = self._position + 1
        recorded = self._history_records.get(position)
        if recorded is not None and not (
            isinstance(recorded, PatchRecorded) and recorded.patch_id == change_id
        ):
            self.old_patches.append(change_id)
            return False  # recorded before the patch: keep the old code path, use no position
        self._next_position()
        command = Intent(
            position, "patch", change_id, None, args_hash("patch", change_id, None), DurableFuture(position)
        )
        command.future.set_result(True)
        self._issue(command)
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
        """A model call whose record names the same model but another args hash: a prompt is
        activity input (seed 003), so this is drift to record, not a divergence -- unless the app
        asked for ``strict_prompts``. Recorded once per (position, issued hash): a later replay
        of a history that holds the PromptDrifted record finds it and records nothing."""
        if (
            self.app.strict_prompts
            or command.kind != "model"
            or not isinstance(recorded, ModelCallScheduled)
            or recorded.model != command.name
            or command.matches(recorded.args_hash)
        ):
            return False
        drift = Drift(
            command.position,
            command.name,
            recorded.prompt_version,
            command.prompt_version,
            recorded.args_hash,
            command.hash,
        )
        self.drift.append(drift)
        if (drift.position, drift.issued_args_hash) in self._drift_in_history:
            return True
        self._drift_in_history.add((drift.position, drift.issued_args_hash))
        event = PromptDrifted(
            run_id=self.run_id,
            position=drift.position,
            model=drift.model,
            recorded_prompt_version=drift.recorded_prompt_version,
            issued_prompt_version=drift.issued_prompt_version,
            recorded_args_hash=drift.recorded_args_hash,
            issued_args_hash=drift.issued_args_hash,
        )
        if self.replaying:
            self._after_replay.append(event)  # its seq must follow the recorded events'
        else:
            self._emit(event)
        return True

    def _record(self, command: Intent) -> None:
        """Live: emit the command's record; calls and timers then wait in ``ready`` for durability."""
        if command.kind == "model":
            # The whole input is recorded: the messages through the run's message sequence (each
            # distinct one once per run), the params as JSON. ``args`` stays null (the input is
            # in the fields below; the replay match needs only args_hash).
            prompt = self._prompts.encode(command.recorded_args["messages"])
            if prompt.blobs:
                self.blobs.update(prompt.blobs)
            params = command.recorded_args["params"]
            self._emit(
                ModelCallScheduled(
                    run_id=self.run_id,
                    position=command.position,
                    model=command.name,
                    args_hash=command.hash,
                    prompt_version=command.prompt_version,
                    message_count=prompt.message_count,
                    message_slots=prompt.message_slots,
                    new_roles=prompt.new_roles,
                    new_messages=prompt.new_messages,
                    params=canonical_json(params) if params else None,
                )
            )
        elif command.kind == "tool":
            self._emit(
                ToolCallScheduled(
                    run_id=self.run_id,
                    position=command.position,
                    tool=command.name,
                    args_hash=command.hash,
                    args=canonical_json(command.recorded_args),
                    effect=command.effect,
                    idempotency_key=command.key,
                    compensates=command.compensates,
                )
            )
        elif command.kind in ("timer", "signal"):
            command.fire_at = self.stamp.clock() + command.duration_ms
            self._emit(
                TimerScheduled(
                    run_id=self.run_id,
                    position=command.position,
                    name="sleep" if command.kind == "timer" else f"signal:{command.name}",
                    fire_at=command.fire_at,
                    duration_ms=command.duration_ms,
                )
            )
        elif command.kind == "patch":
            self._emit(PatchRecorded(run_id=self.run_id, position=command.position, patch_id=command.name))
            return
        self.ready.append(command)

    # ----------------------------------------------------------------------------- driving
    def _drive(self) -> None:
        while self.active and self.divergence is None:
            if self._blocked_on is not None and not self._blocked_on.done:
                return
            try:
                yielded = self._coro.send(None)
            except StopIteration as stop:
                self._finish_with(stop.value)
                return
            except ContinueAsNew as again:
                self._finish(
                    RunContinuedAsNew(
                        run_id=self.run_id,
                        new_run_id=f"{self.run_id}.{self.seq + 1}",
                        input=canonical_json(again.input),
                    )
                )
                return
            except DecisionOutOfBounds as error:  # not a failure: an operator decides
                self._finish(RunParked(run_id=self.run_id, reason=str(error), position=error.position))
                return
            except Unwound as unwound:  # the compensations ran: the run ends as it was going to
                self._finish(unwound.event)
                return
            except Exception as error:  # the workflow raised: the run fails with its error
                failed = RunFailed(run_id=self.run_id, error_type=type(error).__name__, error=str(error))
                if self._begin_unwind(failed):
                    continue
                self._finish(failed)
                return
            if not isinstance(yielded, (DurableFuture, GatherFuture)):
                self._coro.close()
                self._finish(
                    RunFailed(
                        run_id=self.run_id,
                        error_type="NonDurableAwait",
                        error=f"workflow awaited {yielded!r}; await only ctx.model/tool/sleep/wait_signal/gather",
                    )
                )
                return
            self._blocked_on = yielded
        if self.divergence is not None and self.active:
            self._park_divergence()

    def _finish_with(self, value: Any) -> None:
        try:
            text = canonical_json(value)
        except (TypeError, ValueError) as error:
            self._finish(RunFailed(run_id=self.run_id, error_type="ResultNotJSON", error=str(error)))
            return
        self.result = value
        self._finish(RunCompleted(run_id=self.run_id, result=text))

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

    def cancel(self, reason: str, command_offset: int) -> Event:
        """Cancel now, or -- effects to compensate -- record the request and unwind first."""
        if self.saga.unwinding or self.saga.pending():
            return self.record(
                SignalReceived(
                    run_id=self.run_id,
                    name=CANCEL_SIGNAL,
                    payload=json.dumps(reason),
                    command_offset=command_offset,
                )
            )
        event = self.record(RunCancelled(run_id=self.run_id, reason=reason, command_offset=command_offset))
        return event

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
