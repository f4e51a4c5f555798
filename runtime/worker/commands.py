"""Commands from outside a run -- submissions, signals, cancellations -- turned into events.

Nothing accepted is dropped silently: a submission that cannot run (unknown workflow, malformed
or wrongly shaped input, a bad reset seed, an undecodable record) ends as ``RunRejected`` with
the reason, and so does one whose handling raised. Only a failure the log or the registry may
recover from (a ``RetryableError``) is not turned into a rejection: the worker stops before any
checkpoint covers the command, and a restarted worker handles it again -- a valid run must not
be rejected because a service blinked.

Any producer may submit (docs/producers.md is the contract). Two mistakes a producer that is
not agentlog's own can make are handled here rather than lost:
- **No key.** Every command is keyed by its run id. A keyless one (or one whose key is not
  UTF-8 text) ends as ``RunRejected`` naming what was wrong, under the id ``keyless_run_id``
  gives its coordinates (``keyless-<partition>-<offset>-<n>``, n chosen so that the id's home is
  that partition: ``agentlog status`` finds it) -- it used to start a run with id "", and every
  later keyless one was ignored as its duplicate.
- **The wrong partition.** A run lives in partition ``murmur2(key) % n`` of both topics (Kafka's
  Java partitioner; librdkafka's default, ``consistent_random``, is CRC32 and disagrees). A command
  read from another partition is forwarded, byte for byte, to its home partition of the commands
  topic, and counts as handled only once the forward is acknowledged (the loop waits for that
  ack: one round trip, paid only by misrouted commands). A worker killed after the ack but before
  a checkpoint covers the command forwards it again on restart; the home partition ignores a
  submission whose run id it knows, so the run starts once.

A sealed submission (``Settings.seal_contents``) may be read a moment before its data key: a
client writes the key just before the command without waiting for its ack. Its key is not waited
for here, on the event loop every run of the worker steps on: the command is **held**, the key
fetched by a thread of the key store (``KeyStore.opening_key_later``), and the command handled once it has
arrived -- meanwhile every live run keeps stepping and the other partitions' commands flow. The
commands behind a held one *in its partition* wait behind it, in order: a rebuild resumes the
commands topic after the highest command offset its events name (runtime.worker.rebuild), so a
later command applied first would let a crash skip the held one; and the checkpoint commits no
offset past it. A key still missing after ``KEY_ARRIVAL_TIMEOUT`` (never written, or destroyed
before the run started) ends the submission as ``RunRejected`` naming the run and the key; a
resubmission of a run the partition already has is ignored as any duplicate is, whatever became of
its key (an ended run may have been erased since).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from runtime.errors import AgentlogError, RetryableError
from runtime.log.port.partitioning import name_in_partition, partition_of_key
from runtime.log.port.protocol import Delivery, WriteError
from runtime.log.records.events import (
    CancelRequested,
    ChildEnded,
    ChildRunEnded,
    Event,
    RunRejected,
    RunStarted,
    RunSubmitted,
    SignalReceived,
    SignalSent,
)
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.keys import KEY_ARRIVAL_TIMEOUT
from runtime.log.sealing.sealer import KeyPending
from runtime.replay.reset import SeedError, decode_seed
from runtime.worker.admission import Admission
from runtime.worker.batching import TurnBatcher
from runtime.worker.budgets import binding_budget
from runtime.worker.execution import Executor
from runtime.worker.partition import OwnedPartition
from runtime.worker.resources import lacking, out_of
from runtime.worker.tracing import trace_id_for
from runtime.workflow.activation import Cancel, Deliver, Wake
from runtime.workflow.app import App
from runtime.workflow.compensation import RESERVED_SIGNAL_PREFIX
from runtime.workflow.deadlines import binding
from runtime.workflow.input_shape import shape_error
from runtime.workflow.instance import new_run
from runtime.workflow.intents import with_envelope

log = logging.getLogger("agentlog.worker")

RAW_LIMIT = 10_000  # characters of a rejected input kept in its RunRejected record
FORWARD_TIMEOUT_S = 30.0  # a forward not acknowledged by then stops the worker (retryable)
PRODUCERS_DOC = "docs/producers.md"


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
        if serde.sealer is not None:
            # A submission's key not cached yet is fetched off the loop, its command held meanwhile.
            serde.sealer.wait_for_keys = False
        self.admission: Admission | None = None  # set by the worker (runtime.worker.admission)

    def handle(self, owned: OwnedPartition, delivery: Delivery) -> None:
        """Apply one command; a failure ends it as RunRejected (see the module docstring)."""
        offset = delivery.offset
        if owned.lost or offset < owned.next_command:
            return
        if owned.held:  # a submission waits for its key: the partition's commands queue behind it
            owned.held.append(delivery)
            return
        if self.admission is not None and self.admission.takes(owned, delivery):
            return  # held until the run cache has room, or handled before a takeover
        self.handle_now(owned, delivery)

    def handle_now(self, owned: OwnedPartition, delivery: Delivery) -> None:
        """Apply one command now (``handle`` in its turn, or admitted after being held)."""
        offset = delivery.offset
        if self.admission is not None:
            self.admission.note_handled(owned, offset)
        else:
            owned.next_command = offset + 1
        key = delivery.key
        if key:
            home = partition_of_key(key, self.executor.settings.partitions)
            if home != delivery.partition:
                self._forward(owned, delivery, home)
                return
        run_id = _run_id_of(key) or keyless_run_id(
            delivery.partition, offset, self.executor.settings.partitions
        )
        try:
            self._apply(owned, run_id, delivery)
        except KeyPending as pending:
            self._hold(owned, delivery, pending)
        except RetryableError as error:
            owned.next_command = offset  # not covered by a checkpoint: the restart handles it again
            raise WorkerError(f"stopping at command {delivery.partition}@{offset}: {error}") from error
        except Exception as error:  # the command's own failure: it ends visibly, the partition goes on
            # A lack of the worker's, not the command's failure: the command is handled after a restart.
            if (short_of := lacking(error)) is not None:
                owned.next_command = offset
                raise WorkerError(
                    out_of(short_of, f"command {delivery.partition}@{offset}", error)
                ) from error
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

    def _hold(self, owned: OwnedPartition, delivery: Delivery, pending: KeyPending) -> None:
        """Hold a submission whose data key is not cached yet; fetch the key in a thread, and
        handle the command (and those queued behind it) back in the loop once it has arrived."""
        if pending.run_id in owned.known_runs:
            log.info("run %s already exists: duplicate submission ignored", pending.run_id)
            return
        sealer = self.serde.sealer
        assert sealer is not None  # KeyPending comes from it
        owned.next_command = delivery.offset  # not handled: no checkpoint commits past it
        owned.held.append(delivery)
        log.info(
            json.dumps(
                {
                    "event": "submission_key_awaited",
                    "run": pending.run_id,
                    "key": pending.key_id,
                    "command": f"{delivery.partition}@{delivery.offset}",
                }
            )
        )
        loop = asyncio.get_running_loop()

        def arrived(fetched: Future[bytes | None]) -> None:  # in the fetching thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: the worker has stopped
                loop.call_soon_threadsafe(self._resume, owned, pending, fetched)

        sealer.keys.opening_key_later(pending.key_id, KEY_ARRIVAL_TIMEOUT).add_done_callback(arrived)

    def _resume(self, owned: OwnedPartition, pending: KeyPending, fetched: Future[bytes | None]) -> None:
        """The held submission's key has arrived, or will not: handle it and the commands behind it."""
        sealer = self.serde.sealer
        if owned.lost or not owned.held or fetched.cancelled() or sealer is None:
            return  # the partition went to another owner, or the worker is stopping: they handle it
        first = owned.held[0]
        where = f"{first.partition}@{first.offset}"
        error = fetched.exception()
        if error is not None:  # the keys topic could not be read: not the submission's fault
            self.executor.failure = self.executor.failure or (
                f"stopping at command {where}: the data key of run {pending.run_id} could not be read: {error}"
            )
            return
        if fetched.result() is None and sealer.keys.closing:
            return  # the wait was cut short by the stop; the restart handles the command again
        held, owned.held = owned.held, []
        if fetched.result() is None:
            topic = self.executor.settings.keys_topic
            reason = (
                f"run {pending.run_id}: its data key {pending.key_id!r} is not in the keys topic {topic!r} "
                f"{KEY_ARRIVAL_TIMEOUT:g} s after the submission was read (never written, or destroyed "
                "before the run started), so its sealed input cannot be opened; a producer writes a run's "
                "key before its command (docs/erasure.md)"
            )
            try:
                self._reject(owned, pending.run_id, None, reason, "", first.offset)
            except Exception as failure:
                self.executor.failure = self.executor.failure or (
                    f"stopping: the rejection of command {where} of run {pending.run_id} could not be "
                    f"recorded ({failure})"
                )
                return
            owned.next_command = first.offset + 1
            held = held[1:]
        try:
            for delivery in held:  # in order; one may be held in its turn, the rest behind it again
                # The submission that waited for its key passed admission already (it may have been
                # admitted after other held commands: not held behind them again).
                (self.handle_now if delivery is first else self.handle)(owned, delivery)
        except WorkerError as failure:  # handle() left next_command at the command that stopped it
            self.executor.failure = self.executor.failure or str(failure)

    def _forward(self, owned: OwnedPartition, delivery: Delivery, home: int) -> None:
        """Send a misrouted command to its home partition, untouched, and wait for the ack."""
        settings = self.executor.settings
        where = f"{settings.commands_topic}[{delivery.partition}]@{delivery.offset}"
        sent = self.executor.log.append(settings.commands_topic, home, delivery.key, delivery.value)
        try:
            at = sent.result(timeout=FORWARD_TIMEOUT_S)
        except (WriteError, FutureTimeout) as error:
            owned.next_command = delivery.offset  # the restart forwards it again
            raise WorkerError(
                f"stopping: command {where} could not be forwarded to its home partition {home}: "
                f"{error or 'no ack within ' + str(FORWARD_TIMEOUT_S) + 's'}"
            ) from error
        owned.writes_since_checkpoint += 1  # the next checkpoint records the command as handled
        log.warning(
            json.dumps(
                {
                    "event": "command_forwarded",
                    "from": where,
                    "to": f"{settings.commands_topic}[{home}]@{at}",
                    "run": (delivery.key or b"").decode("utf-8", "replace"),
                    "why": f"its key's murmur2 partition is {home}: the producer did not use Kafka's "
                    "murmur2 partitioner (librdkafka's default is consistent_random, CRC32; "
                    f"set partitioner=murmur2_random; see {PRODUCERS_DOC})",
                }
            )
        )

    def _apply(self, owned: OwnedPartition, run_id: str, delivery: Delivery) -> None:
        offset = delivery.offset
        if _run_id_of(delivery.key) is None:
            self._reject(owned, run_id, None, _keyless_reason(delivery), "", offset)
            return
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
            run = (
                None
                if _started_after(owned, command.run_id, offset)
                else self.executor.runs.run(owned, command.run_id)
            )
            if run is None:
                log.info("signal %r for run %s that is not running: ignored", command.name, command.run_id)
                return
            if command.name.startswith(RESERVED_SIGNAL_PREFIX):  # agentlog's own (a cancel's record)
                log.warning(
                    json.dumps(
                        {"event": "reserved_signal_ignored", "run": command.run_id, "name": command.name}
                    )
                )
                return
            received = SignalReceived(
                run_id=command.run_id, name=command.name, payload=command.payload, command_offset=offset
            )
            completion = run.activate(Deliver(received))
            self.executor.metrics.step(completion.view.workflow)
            self.executor.flush(owned, run, completion)
        elif isinstance(command, ChildEnded):  # a child's ending (runtime.worker.children)
            run = self.executor.runs.run(owned, command.run_id)  # woken if it was evicted
            if run is None:
                log.info(
                    "ending of child %s for run %s that is not running: ignored",
                    command.child_run_id,
                    command.run_id,
                )
                return
            ended = ChildRunEnded(
                run_id=command.run_id,
                position=0,  # the run knows the child's position
                child_run_id=command.child_run_id,
                child_status=command.child_status,
                result=command.result,
                error_type=command.error_type,
                error=command.error,
                spend=command.spend,
                command_offset=offset,
            )
            self.executor.flush(owned, run, run.activate(Deliver(ended)))
        elif isinstance(command, CancelRequested):
            run = (
                None
                if _started_after(owned, command.run_id, offset)
                else self.executor.runs.run(owned, command.run_id)
            )
            if run is None:
                log.info("cancel for run %s that is not running: ignored", command.run_id)
                return
            self.executor.flush(owned, run, run.activate(Cancel(command.reason, offset)))

    def _submit(self, owned: OwnedPartition, command: RunSubmitted, offset: int) -> None:
        if command.run_id in owned.known_runs:
            log.info("run %s already exists: duplicate submission ignored", command.run_id)
            return
        app, problem = self.app, None
        try:  # a what-if's code version (runtime.worker.versions), if this worker holds it
            app = self.executor.versions.app_for(command)
        except AgentlogError as error:
            problem = str(error)
        problem = problem or self._submission_problem(command, app)
        budget: str | None = None
        if problem is None:
            budget, problem = binding_budget(command.budget, app.workflows[command.workflow].budget)
        copies: list[Event] = []
        if problem is None and command.reset_from is not None:
            try:
                copies = decode_seed(command.seed or "[]", command.reset_position)
            except SeedError as error:
                problem = str(error)
        if problem is not None:
            self._reject(owned, command.run_id, command.workflow, problem, command.input, offset)
            if command.child_of:  # its parent waits for it (runtime.worker.children)
                self.executor.children.rejected(command.child_of, command.run_id, problem)
            return
        started_at = now_ms()
        started = RunStarted(
            run_id=command.run_id,
            seq=1,
            occurred_at=started_at,
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
            budget=budget,
            # the submission's or the workflow's deadline, the earlier: a timer the run arms
            deadline=binding(command.deadline, app.workflows[command.workflow].deadline_ms, started_at),
            child_of=command.child_of,
            whatif=command.whatif,  # a what-if's fork (runtime.whatif): marked, its change applied
            whatif_change=command.whatif_change,
        )
        # A reset's copied events keep their original times (ctx.now() replays as it ran).
        copies = [
            with_envelope(e, command.run_id, seq, e.occurred_at, self.worker_id, owned.epoch)
            for seq, e in enumerate(copies, start=2)
        ]
        owned.sizes[command.run_id] = [0, 0]
        self.batcher.append(owned, [started, *copies])  # first: a run whose start fails has no machine
        run = self.executor.versions.new_run(
            started, owned.stamp, new_run, history_warn_events=self.executor.settings.history_warn_events
        )
        owned.runs[command.run_id] = run
        self.executor.metrics.run_started(command.workflow)
        # A reset replays the copied records, then goes live, as a recovered run does.
        self.executor.flush(owned, run, run.activate(Wake([started, *copies] if copies else ())))

    def _submission_problem(self, command: RunSubmitted, app: App) -> str | None:
        spec = app.workflows.get(command.workflow)
        if spec is None:
            return f"unknown workflow {command.workflow!r} (registered: {', '.join(sorted(app.workflows))})"
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


def keyless_run_id(partition: int, offset: int, partitions: int) -> str:
    """The run id of the rejection of the keyless command at ``partition``@``offset``."""
    return name_in_partition(f"keyless-{partition}-{offset}", partition, partitions)


def _started_after(owned: OwnedPartition, run_id: str, offset: int) -> bool:
    """A command at ``offset`` read again after a takeover, for a run started by a later submission:
    it was ignored the first time (runtime.worker.admission), and is again."""
    return owned.window is not None and owned.window.started_after(run_id, offset)


def _run_id_of(key: bytes | None) -> str | None:
    """The run id a command's key names; None for no key, an empty one or one that is not UTF-8 (a
    run's events are keyed by its id re-encoded, so other bytes would land in another partition)."""
    if not key:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _keyless_reason(delivery: Delivery) -> str:
    what = "has no key" if not delivery.key else f"has a key that is not UTF-8 text ({delivery.key[:40]!r})"
    return (
        f"command at offset {delivery.offset} {what}: every command must be keyed by its run id "
        f"(UTF-8), which also picks its partition (murmur2); see {PRODUCERS_DOC}"
    )
