"""Commands from outside a run -- submissions, signals, cancellations -- turned into events.

Nothing accepted is dropped silently: a submission that cannot run (unknown workflow, malformed
or wrongly shaped input, a bad reset seed, an undecodable record) ends as ``RunRejected`` with
the reason, and so does one whose handling raised. Only a failure the log or the registry may
recover from (a ``RetryableError``) is not turned into a rejection: the worker stops before any
checkpoint covers the command, and a restarted worker handles it again -- a valid run must not
be rejected because a service blinked.
"""

from __future__ import annotations

import json
import logging
import time

from runtime.errors import AgentlogError, RetryableError
from runtime.log.events import (
    CancelRequested,
    Event,
    RunRejected,
    RunStarted,
    RunSubmitted,
    SignalReceived,
    SignalSent,
)
from runtime.log.port import Delivery
from runtime.log.serde import DecodeError, Serde
from runtime.replay.reset import SeedError, decode_seed
from runtime.worker.batching import TurnBatcher
from runtime.worker.execution import Executor
from runtime.worker.partition import OwnedPartition
from runtime.worker.tracing import trace_id_for
from runtime.workflow.app import App
from runtime.workflow.input_shape import shape_error
from runtime.workflow.intents import with_envelope
from runtime.workflow.machine import RunMachine

log = logging.getLogger("agentlog.worker")

RAW_LIMIT = 10_000  # characters of a rejected input kept in its RunRejected record


class WorkerError(AgentlogError):
    """The worker cannot go on safely; the message says why."""


def now_ms() -> int:
    return int(time.time() * 1000)


class CommandHandler:
    """Applies the commands of owned partitions, in offset order."""

    def __init__(
        self, app: App, serde: Serde, batcher: TurnBatcher, executor: Executor, worker_id: str
    ) -> None:
        self.app = app
        self.serde = serde
        self.batcher = batcher
        self.executor = executor
        self.worker_id = worker_id

    def handle(self, owned: OwnedPartition, delivery: Delivery) -> None:
        """Apply one command; a failure ends it as RunRejected (see the module docstring)."""
        offset = delivery.offset
        if owned.lost or offset < owned.next_command:
            return
        owned.next_command = offset + 1
        key = delivery.key
        run_id = key.decode("utf-8", "replace") if key else f"poison-{delivery.partition}-{offset}"
        try:
            self._apply(owned, run_id, delivery)
        except RetryableError as error:
            owned.next_command = offset  # not covered by a checkpoint: the restart handles it again
            raise WorkerError(f"stopping at command {delivery.partition}@{offset}: {error}") from error
        except Exception as error:  # the command's own failure: it ends visibly, the partition goes on
            log.exception("command %s@%s of run %s", delivery.partition, offset, run_id)
            try:
                self._reject(
                    owned, run_id, None, f"handling failed: {type(error).__name__}: {error}", "", offset
                )
            except Exception as reject_error:
                owned.next_command = offset
                raise WorkerError(
                    f"stopping: command {delivery.partition}@{offset} of run {run_id} failed ({error}) "
                    f"and its rejection could not be recorded ({reject_error})"
                ) from reject_error

    def _apply(self, owned: OwnedPartition, run_id: str, delivery: Delivery) -> None:
        offset = delivery.offset
        try:
            command = self.serde.decode(delivery.value or b"", delivery.key)
        except DecodeError as decode_error:
            self._reject(
                owned, run_id, None, f"undecodable command at offset {offset}: {decode_error}", "", offset
            )
            return
        if isinstance(command, RunSubmitted):
            self._submit(owned, command, offset)
        elif isinstance(command, SignalSent):
            machine = owned.runs.get(command.run_id)
            if machine is None:
                log.info("signal %r for run %s that is not running: ignored", command.name, command.run_id)
                return
            machine.record(
                SignalReceived(
                    run_id=command.run_id, name=command.name, payload=command.payload, command_offset=offset
                )
            )
            self.executor.flush(owned, machine)
        elif isinstance(command, CancelRequested):
            machine = owned.runs.get(command.run_id)
            if machine is None:
                log.info("cancel for run %s that is not running: ignored", command.run_id)
                return
            machine.cancel(command.reason, offset)
            self.executor.flush(owned, machine)

    def _submit(self, owned: OwnedPartition, command: RunSubmitted, offset: int) -> None:
        if command.run_id in owned.known_runs:
            log.info("run %s already exists: duplicate submission ignored", command.run_id)
            return
        problem = self._submission_problem(command)
        copies: list[Event] = []
        if problem is None and command.reset_from is not None:
            try:
                copies = decode_seed(command.seed or "[]", command.reset_position)
            except SeedError as error:
                problem = str(error)
        if problem is not None:
            self._reject(owned, command.run_id, command.workflow, problem, command.input, offset)
            return
        started = RunStarted(
            run_id=command.run_id,
            seq=1,
            occurred_at=now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
            workflow=command.workflow,
            input=command.input,
            command_offset=offset,
            # The chain: a continued run's parent (a reset's parent has a reset_position too).
            parent_run_id=command.reset_from or command.continued_from,
            reset_position=command.reset_position,
            key_root=command.key_root,
            trace_id=trace_id_for(command.run_id),
            fork_overrides=command.fork_overrides,
        )
        # A reset's copied events keep their original times (ctx.now() replays as it ran).
        copies = [
            with_envelope(e, command.run_id, seq, e.occurred_at, self.worker_id, owned.epoch)
            for seq, e in enumerate(copies, start=2)
        ]
        owned.sizes[command.run_id] = [0, 0]
        self.batcher.append(owned, [started, *copies])  # first: a run whose start fails has no machine
        machine = RunMachine(
            self.app,
            started,
            owned.stamp,
            history=[started, *copies] if copies else (),
            history_warn_events=self.executor.settings.history_warn_events,
        )
        owned.runs[command.run_id] = machine
        machine.begin()
        if copies:
            machine.replay(copies)
            machine.finish_replay()
        self.executor.flush(owned, machine)

    def _submission_problem(self, command: RunSubmitted) -> str | None:
        spec = self.app.workflows.get(command.workflow)
        if spec is None:
            return (
                f"unknown workflow {command.workflow!r} (registered: {', '.join(sorted(self.app.workflows))})"
            )
        try:
            value = json.loads(command.input)
        except json.JSONDecodeError as error:
            return f"malformed JSON input: {error}"
        problem = shape_error(spec.input_type, value)
        return None if problem is None else f"wrong input shape: {problem}"

    def _reject(
        self, owned: OwnedPartition, run_id: str, workflow: str | None, reason: str, raw: str, offset: int
    ) -> None:
        log.warning(json.dumps({"event": "run_rejected", "run": run_id, "reason": reason}))
        rejected = RunRejected(
            run_id=run_id,
            seq=1,
            occurred_at=now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
            reason=reason,
            workflow=workflow,
            raw=raw[:RAW_LIMIT],
            command_offset=offset,
        )
        self.batcher.append(owned, [rejected])
