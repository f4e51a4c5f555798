"""The worker: owns partitions of the commands topic and drives the runs that live there.

Per step the commit path is (DESIGN.md, "Exactly-once, fencing, recovery"):
    workflow issues a call -> its ...Scheduled record is appended -> wait for the ack
    (idempotent producer: acked means durable, and so is everything before it)
    -> [effecting tool only: check no newer epoch claim precedes it] -> call
    -> append ...Completed / ...Failed without waiting -> resume the workflow.
One ack per call, no transaction per result: transactions cost 2.5 ms median, 22 ms p90 on
one broker. Fencing is by epoch (runtime.log.fencing); the command offsets a run consumed are
recorded in its events, so a rebuilt partition resumes the commands topic exactly there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.events import (
    CancelRequested,
    Event,
    PartitionCheckpoint,
    RunParked,
    RunRejected,
    RunStarted,
    RunSubmitted,
    SignalReceived,
    SignalSent,
    TimerFired,
)
from runtime.log.kafka import EventWriter, WriteError, offset_of, reader_config
from runtime.log.payloads import outlined
from runtime.log.serde import DecodeError, Serde
from runtime.replay.reset import SeedError, decode_seed
from runtime.worker.call_pool import CallPool
from runtime.worker.calls import attempt_once, completed, failed, is_retryable, retry_policy
from runtime.worker.membership import Membership
from runtime.worker.ownership import OwnershipTail
from runtime.worker.rebuild import RUN_KEY_PREFIX, checkpoint_key, claim, rebuild
from runtime.workflow.app import App
from runtime.workflow.input_shape import shape_error
from runtime.workflow.machine import Intent, RunMachine, Stamp, with_envelope

log = logging.getLogger("agentlog.worker")


class WorkerError(AgentlogError):
    """The worker cannot go on safely; the message says why."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class OwnedPartition:
    """What a worker holds for one partition it owns."""

    partition: int
    epoch: int
    stamp: Stamp
    next_command: int
    known_runs: set[str]
    runs: dict[str, RunMachine] = field(default_factory=dict)
    first_offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, list[int]] = field(default_factory=dict)  # run id -> [events, bytes]
    last_write: asyncio.Future[int] | None = None
    lost: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    writes_since_checkpoint: int = 0
    warned: set[str] = field(default_factory=set)
    checkpoint_running: bool = False
    # Records appended during this turn of the event loop, sent together at its end (_send).
    pending: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    pending_started: dict[int, str] = field(default_factory=dict)  # index -> run id: its first offset
    pending_last: asyncio.Future[int] | None = None
    pending_runs: list[str] = field(default_factory=list)  # started or rejected: to index


class Worker:
    """Runs the workflows of ``app`` for the partitions the consumer group gives it."""

    def __init__(
        self,
        app: App,
        settings: Settings,
        *,
        worker_id: str | None = None,
        session_timeout_ms: int = 10_000,
        checkpoint_interval_s: float = 2.0,
        membership: Membership | None = None,
        serde: Serde | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.worker_id = worker_id or socket.gethostname()
        self.serde = serde or Serde(settings)
        self.writer = EventWriter(settings)
        self.checkpoint_interval_s = checkpoint_interval_s
        self.owned: dict[int, OwnedPartition] = {}
        self._dirty: list[OwnedPartition] = []  # partitions with records queued this loop turn
        self._stopping = False
        self._last_checkpoint_round = time.monotonic()
        self._tail: OwnershipTail | None = None  # these two need the running loop: made in serve()
        self._pool: CallPool
        # Created now so it is connected by the time partitions arrive (rebuilds read with it).
        self._reader = Consumer(reader_config(settings))
        self.membership = membership or Membership(settings, self.worker_id, session_timeout_ms)
        self.membership.on_assign, self.membership.on_revoke = self._on_assign, self._on_revoke
        self.consumer = self.membership.consumer

    # ------------------------------------------------------------------------------ serving
    def run(self) -> None:
        """Serve until SIGTERM/SIGINT, on uvloop: the loop's own overhead (handles, futures, the
        selector) is a large share of a step's CPU, and uvloop's is about half of asyncio's."""
        import gc

        import uvloop

        # Every step allocates events, dicts and futures that die young; with the default
        # threshold (700) the cyclic collector ran thousands of times a second, walking the live
        # runs' histories each time (T rose ~25% without it). What start-up loaded is frozen
        # out of the collector's walks; cycles are still collected, 50,000 allocations apart.
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        uvloop.run(self.serve())

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._tail = OwnershipTail(self.settings, self.serde, loop)
        self._pool = CallPool(loop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(sig, self.stop)
        log.info(json.dumps({"event": "worker_started", "worker": self.worker_id, "pid": os.getpid()}))
        try:
            while not self._stopping and not (stop is not None and stop.is_set()):
                messages = self.consumer.consume(num_messages=500, timeout=0)
                for message in messages:
                    try:
                        self._handle_command(message)
                    except KafkaException:
                        raise
                    except Exception:  # one bad record must never stop the partition
                        log.exception(
                            "command at %s[%s]@%s", message.topic(), message.partition(), message.offset()
                        )
                self._maybe_checkpoint()
                if self.writer.failure is not None:
                    # A record nobody watched was lost: what follows it cannot be trusted. Stop;
                    # a restarted worker rebuilds from what the log really holds.
                    raise WorkerError(f"stopping: {self.writer.failure}")
                # Poll again soon while runs are live; an idle worker looks for commands every
                # 10 ms (at 2 ms it used 5% of a core doing nothing).
                await asyncio.sleep(0 if messages else 0.002 if self._live_runs() else 0.01)
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stopping = True

    def _live_runs(self) -> bool:
        return any(owned.runs for owned in self.owned.values())

    async def _shutdown(self) -> None:
        tasks = [t for owned in self.owned.values() for t in owned.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._send()  # results recorded before the stop are not left unsent
        self.writer.close()
        if self._tail is not None:
            self._tail.close()
        self._pool.close()
        self._reader.close()
        self.consumer.close()
        log.info(json.dumps({"event": "worker_stopped", "worker": self.worker_id}))

    # ------------------------------------------------------------------------------ partitions
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # All claims go out at once; each rebuild then waits only for its own.
        claims = {
            tp.partition: claim(self.settings, self.serde, self.writer, tp.partition, self.worker_id)
            for tp in partitions
        }
        for tp in partitions:
            owned = self._take(tp.partition, claims[tp.partition].result(timeout=30))
            tp.offset = owned.next_command
        consumer.incremental_assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._lose(tp.partition, "revoked")

    def _take(self, partition: int, epoch: int) -> OwnedPartition:
        started = time.perf_counter()
        rebuilt = rebuild(self.settings, self.serde, partition, epoch, self._reader)
        stamp = Stamp(_now_ms, self.worker_id, rebuilt.epoch)
        owned = OwnedPartition(
            partition,
            rebuilt.epoch,
            stamp,
            rebuilt.commands_offset,
            rebuilt.known_runs,
        )
        self.owned[partition] = owned
        if self._tail is not None:
            self._tail.watch(partition, rebuilt.epoch)
        in_doubt: list[dict[str, Any]] = []
        for run_id, events in rebuilt.active.items():
            started_event = events[0]
            assert isinstance(started_event, RunStarted)
            owned.first_offsets[run_id] = rebuilt.first_offsets[run_id]
            owned.sizes[run_id] = rebuilt.sizes.get(run_id, [0, 0])
            try:
                if run_id in rebuilt.unloadable:
                    raise WorkerError(rebuilt.unloadable[run_id])
                machine = RunMachine(self.app, started_event, stamp, history=events)
            except Exception as error:
                self._park_unrunnable(owned, events[-1], error)
                continue
            machine.begin()
            machine.replay(events)
            machine.finish_replay()
            in_doubt += [{"run": run_id, **d.__dict__} for d in machine.in_doubt]
            owned.runs[run_id] = machine
            self._flush(owned, machine)
        log.info(
            json.dumps(
                {
                    "event": "partition_taken",
                    "partition": partition,
                    "epoch": rebuilt.epoch,
                    "records_read": rebuilt.records_read,
                    "records_decoded": rebuilt.records_decoded,
                    "fenced": rebuilt.fenced,
                    "active_runs": len(rebuilt.active),
                    "commands_offset": rebuilt.commands_offset,
                    "in_doubt": in_doubt,
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                }
            )
        )
        return owned

    def _park_unrunnable(self, owned: OwnedPartition, last: Event, error: Exception) -> None:
        parked = RunParked(
            run_id=last.run_id,
            reason=f"cannot resume on this worker: {error}",
            seq=last.seq + 1,
            occurred_at=_now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
        )
        self._append(owned, [parked])

    def _lose(self, partition: int, why: str) -> None:
        owned = self.owned.pop(partition, None)
        if owned is None:
            return
        owned.lost = True
        if self._tail is not None:
            self._tail.unwatch(partition)
        for task in owned.tasks:
            task.cancel()
        log.warning(json.dumps({"event": "partition_lost", "partition": partition, "why": why}))

    # ------------------------------------------------------------------------------ writing
    def _append(self, owned: OwnedPartition, events: list[Event]) -> asyncio.Future[int] | None:
        """Queue events for the partition; the future resolves with the offset of the last record
        queued in this turn of the event loop, once acknowledged.

        Every append of one turn (many runs' results and next calls) leaves in one produce batch,
        sent when the turn ends (``_send``): no timer, so a lone step waits no longer, and under
        load one delivery callback and one loop wake-up serve dozens of records. Only the batch's
        last record (and a RunStarted, for its offset) is watched -- the idempotent producer's
        ack of the last vouches for the rest."""
        if not events:
            return None
        pending = owned.pending
        for event in events:
            value = self.serde.encode(event)
            run_id = event.run_id
            if isinstance(event, RunStarted):
                owned.pending_started[len(pending)] = run_id
            if isinstance(event, (RunStarted, RunRejected)):
                owned.known_runs.add(run_id)
                owned.pending_runs.append(run_id)
            pending.append((run_id.encode() if run_id else None, value))
            size = owned.sizes.get(run_id)
            if size is not None:
                size[0] += 1
                size[1] += len(value)
        future = owned.pending_last
        if future is None:
            loop = asyncio.get_running_loop()
            future = owned.pending_last = loop.create_future()
            if not self._dirty:
                loop.call_soon(self._send)
            self._dirty.append(owned)
        owned.last_write = future
        owned.writes_since_checkpoint += len(events)
        return future

    def _send(self) -> None:
        """End of the loop turn: one produce batch per partition with queued records."""
        dirty, self._dirty = self._dirty, []
        loop = asyncio.get_running_loop()
        for owned in dirty:
            records, started, last, runs = (
                owned.pending,
                owned.pending_started,
                owned.pending_last,
                owned.pending_runs,
            )
            owned.pending, owned.pending_started, owned.pending_last, owned.pending_runs = [], {}, None, []
            assert last is not None
            if owned.lost:  # its successor fences these anyway; nobody waits for them
                last.cancel()
                continue
            watched = {len(records) - 1: last}
            for index, run_id in started.items():  # a RunStarted's offset starts its run's rebuild
                ack = watched.get(index) or watched.setdefault(index, loop.create_future())
                ack.add_done_callback(functools.partial(_remember_first, owned, run_id))
            self.writer.append_batch_async(
                loop, self.settings.events_topic, owned.partition, records, watched
            )
            for run_id in runs:  # the run index, for idempotent submission after a rebuild
                self.writer.append_unwatched(
                    self.settings.checkpoints_topic, owned.partition, RUN_KEY_PREFIX + run_id.encode(), b"1"
                )

    def _flush(self, owned: OwnedPartition, machine: RunMachine) -> None:
        """Append what the machine emitted; start the commands that became ready."""
        events, ready = machine.drain()
        durable = self._append(owned, events) if events else None
        if machine.active and self._over_history_limit(owned, machine):
            ready = []  # parked: nothing more runs
            durable = self._append(owned, machine.drain()[0]) or durable
        if not machine.active:
            owned.runs.pop(machine.run_id, None)
            owned.first_offsets.pop(machine.run_id, None)
            owned.sizes.pop(machine.run_id, None)
        for command in ready:
            task = asyncio.get_running_loop().create_task(self._carry_out(owned, machine, command, durable))
            owned.tasks.add(task)
            task.add_done_callback(owned.tasks.discard)

    def _over_history_limit(self, owned: OwnedPartition, machine: RunMachine) -> bool:
        """Warn once past the warn threshold; park the run at the limit (Temporal's defaults)."""
        events, size = owned.sizes.get(machine.run_id, (0, 0))
        s = self.settings
        if events >= s.history_limit_events or size >= s.history_limit_bytes:
            machine.park(
                f"history limit reached: {events} events, {size} bytes (limit {s.history_limit_events} events or "
                f"{s.history_limit_bytes} bytes); carry state into a fresh run with ctx.continue_as_new"
            )
            return True
        warned = owned.warned
        if (events >= s.history_warn_events or size >= s.history_warn_bytes) and machine.run_id not in warned:
            warned.add(machine.run_id)
            log.warning(
                json.dumps(
                    {"event": "history_size_warning", "run": machine.run_id, "events": events, "bytes": size}
                )
            )
        return False

    # ------------------------------------------------------------------------------ calls
    async def _carry_out(
        self,
        owned: OwnedPartition,
        machine: RunMachine,
        command: Intent,
        durable: asyncio.Future[int] | None,
    ) -> None:
        scheduled_at: int | None = None
        if durable is not None:
            scheduled_at = await durable
        if owned.lost or not machine.active:
            return
        if command.kind in ("timer", "signal"):
            await self._wait_timer(owned, machine, command)
            return
        # An effect starts only once no newer claim can precede its Scheduled record (for an
        # in-doubt re-execution that record predates our claim, so our claim is the mark).
        if command.effect and not await self._still_owner(owned, scheduled_at or owned.epoch):
            self._lose(owned.partition, f"fenced: a newer epoch claimed partition {owned.partition}")
            return
        policy = retry_policy(self.app, command)
        attempt = command.failed_attempts + (2 if command.in_doubt else 1)
        while True:
            started = time.perf_counter()
            try:
                outcome = completed(
                    command, await attempt_once(self.app, command, self._pool), attempt, started
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if owned.lost or not machine.active:
                    return
                final = not is_retryable(policy, error, attempt)
                machine.record(failed(command, error, attempt, started, final))
                self._flush(owned, machine)
                if final:
                    return
                await asyncio.sleep(policy.backoff(attempt))
                attempt += 1
                continue
            if owned.lost or not machine.active:
                return
            text: str | None = None
            if len(outcome.result) > self.settings.payload_inline_limit:  # chars <= bytes: cheap first
                data = outcome.result.encode()
                if len(data) > self.settings.payload_inline_limit:
                    offset = await self._store_payload(owned, machine.run_id, data)
                    if offset is None or owned.lost or not machine.active:
                        return
                    text, outcome = outcome.result, outlined(outcome, offset, data)
            machine.record(outcome, result_text=text)
            self._flush(owned, machine)
            return

    async def _store_payload(self, owned: OwnedPartition, run_id: str, data: bytes) -> int | None:
        """Append a large result to the payloads topic (the run's partition); its offset once
        acknowledged -- before the event that points at it is appended. None if it was not
        acknowledged: the worker then stops (Worker.serve), and the call is in doubt on restart."""
        loop = asyncio.get_running_loop()
        stored: asyncio.Future[int] = loop.create_future()
        self.writer.append_batch_async(
            loop, self.settings.payloads_topic, owned.partition, [(run_id.encode(), data)], {0: stored}
        )
        try:
            return await stored
        except WriteError as error:
            self.writer.failure = self.writer.failure or str(error)
            return None

    async def _wait_timer(self, owned: OwnedPartition, machine: RunMachine, command: Intent) -> None:
        # An asyncio sleep: a run waiting days for a timer or a signal holds no thread.
        await asyncio.sleep(max(0.0, command.fire_at / 1000 - time.time()))
        if owned.lost or not machine.wants_timer(command.position):
            return
        machine.record(TimerFired(run_id=machine.run_id, position=command.position))
        self._flush(owned, machine)

    async def _still_owner(self, owned: OwnedPartition, upto: int) -> bool:
        if self._tail is None or owned.lost:
            return False
        return await self._tail.owned_through(owned.partition, upto)

    # ------------------------------------------------------------------------------ commands
    def _handle_command(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            log.warning("commands consumer: %s", error)
            return
        owned = self.owned.get(message.partition() or 0)
        offset = offset_of(message)
        if owned is None or owned.lost or offset < owned.next_command:
            return
        owned.next_command = offset + 1
        key = message.key()
        run_id = key.decode("utf-8", "replace") if key else f"poison-{message.partition()}-{offset}"
        try:
            command = self.serde.decode(message.value() or b"", key)
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
            self._flush(owned, machine)
        elif isinstance(command, CancelRequested):
            machine = owned.runs.get(command.run_id)
            if machine is None:
                log.info("cancel for run %s that is not running: ignored", command.run_id)
                return
            machine.cancel(command.reason, offset)
            self._flush(owned, machine)

    def _submit(self, owned: OwnedPartition, command: RunSubmitted, offset: int) -> None:
        if command.run_id in owned.known_runs:
            log.info("run %s already exists: duplicate submission ignored", command.run_id)
            return
        spec = self.app.workflows.get(command.workflow)
        if spec is None:
            reason = (
                f"unknown workflow {command.workflow!r} (registered: {', '.join(sorted(self.app.workflows))})"
            )
            self._reject(owned, command.run_id, command.workflow, reason, command.input, offset)
            return
        try:
            value = json.loads(command.input)
        except json.JSONDecodeError as error:
            self._reject(
                owned,
                command.run_id,
                command.workflow,
                f"malformed JSON input: {error}",
                command.input,
                offset,
            )
            return
        problem = shape_error(spec.input_type, value)
        if problem is not None:
            self._reject(
                owned,
                command.run_id,
                command.workflow,
                f"wrong input shape: {problem}",
                command.input,
                offset,
            )
            return
        copies: list[Event] = []
        if command.reset_from is not None:
            try:
                copies = decode_seed(command.seed or "[]", command.reset_position)
            except SeedError as error:
                self._reject(owned, command.run_id, command.workflow, str(error), command.input, offset)
                return
        started = RunStarted(
            run_id=command.run_id,
            seq=1,
            occurred_at=_now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
            workflow=command.workflow,
            input=command.input,
            command_offset=offset,
            parent_run_id=command.reset_from,
            reset_position=command.reset_position,
            key_root=command.key_root,
        )
        # A reset's copied events keep their original times (ctx.now() replays as it ran).
        copies = [
            with_envelope(e, command.run_id, seq, e.occurred_at, self.worker_id, owned.epoch)
            for seq, e in enumerate(copies, start=2)
        ]
        machine = RunMachine(self.app, started, owned.stamp, history=[started, *copies] if copies else ())
        owned.runs[command.run_id] = machine
        owned.sizes[command.run_id] = [0, 0]
        self._append(owned, [started, *copies])
        machine.begin()
        if copies:
            machine.replay(copies)
            machine.finish_replay()
        self._flush(owned, machine)

    def _reject(
        self, owned: OwnedPartition, run_id: str, workflow: str | None, reason: str, raw: str, offset: int
    ) -> None:
        log.warning(json.dumps({"event": "run_rejected", "run": run_id, "reason": reason}))
        rejected = RunRejected(
            run_id=run_id,
            seq=1,
            occurred_at=_now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
            reason=reason,
            workflow=workflow,
            raw=raw[:10_000],
            command_offset=offset,
        )
        self._append(owned, [rejected])

    # ------------------------------------------------------------------------------ checkpoints
    def _maybe_checkpoint(self) -> None:
        if time.monotonic() - self._last_checkpoint_round < self.checkpoint_interval_s:
            return
        self._last_checkpoint_round = time.monotonic()
        loop = asyncio.get_running_loop()
        for owned in list(self.owned.values()):
            if (
                owned.writes_since_checkpoint
                and not owned.checkpoint_running
                and owned.last_write is not None
            ):
                owned.checkpoint_running = True
                task = loop.create_task(self._checkpoint(owned))
                owned.tasks.add(task)
                task.add_done_callback(owned.tasks.discard)

    async def _checkpoint(self, owned: OwnedPartition) -> None:
        """Publish where a rebuild of this partition may start.

        The snapshot (active runs, next command) is taken *before* waiting for the last write,
        so every record it describes is below ``covered_offset``; the first offsets are read
        after the wait, when every listed RunStarted has been acknowledged.
        """
        try:
            assert owned.last_write is not None
            runs = list(owned.runs)
            next_command = owned.next_command
            owned.writes_since_checkpoint = 0
            last = await owned.last_write
            if not await self._still_owner(owned, last):
                self._lose(owned.partition, "fenced while checkpointing")
                return
            active = {run: owned.first_offsets[run] for run in runs if run in owned.first_offsets}
            checkpoint = PartitionCheckpoint(
                run_id="",
                occurred_at=_now_ms(),
                worker=self.worker_id,
                epoch=owned.epoch,
                partition=owned.partition,
                covered_offset=last + 1,
                commands_offset=next_command,
                active_runs=active,
            )
            self.writer.append(
                self.settings.checkpoints_topic,
                owned.partition,
                checkpoint_key(owned.partition),
                self.serde.encode(checkpoint),
            )
            self.consumer.commit(
                offsets=[TopicPartition(self.settings.commands_topic, owned.partition, next_command)],
                asynchronous=True,
            )
        finally:
            owned.checkpoint_running = False


def _remember_first(owned: OwnedPartition, run_id: str, future: asyncio.Future[int]) -> None:
    if not future.cancelled() and future.exception() is None and run_id in owned.runs:
        owned.first_offsets.setdefault(run_id, future.result())
