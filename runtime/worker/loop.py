"""The worker: owns partitions of the commands topic and drives the runs that live there.

The parts, each in its own module: ``takeover`` claims a partition and resumes its runs,
``commands`` turns submissions, signals and cancellations into events, ``execution`` carries out
calls and timers, ``batching`` sends one loop turn's appends together, ``checkpoint`` publishes
where a rebuild may start. This module wires them to one log (``runtime.log.port.protocol.EventLog``) and
runs the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runtime import stagemarks
from runtime.config import ConfigError, Settings
from runtime.log.port.protocol import CommandFeed, Delivery, EventLog
from runtime.log.schemas.serde import Serde
from runtime.worker.admission import Admission
from runtime.worker.batching import TurnBatcher
from runtime.worker.call_pool import CallPool
from runtime.worker.checkpoint import Checkpointer
from runtime.worker.commands import CommandHandler, WorkerError
from runtime.worker.execution import Executor
from runtime.worker.foreign import ForeignRecords
from runtime.worker.health import Readiness
from runtime.worker.intake import CommandIntake
from runtime.worker.limits.shared import SharedPermits
from runtime.worker.partition import OwnedPartition
from runtime.worker.resources import ResourceWatch, note_lacking
from runtime.worker.streaming import RunStreams, StreamOut
from runtime.worker.takeover import Takeover
from runtime.workflow.app import App

if TYPE_CHECKING:
    from runtime.worker.ops import WorkerOps

log = logging.getLogger("agentlog.worker")

__all__ = ["Worker", "WorkerError"]

# How often the loop wakes for its own work (checkpoints, failures, stop) when nothing else does.
_TICK_S = 0.01


class Worker:
    """Runs the workflows of ``app`` for the partitions the workers' group gives it."""

    def __init__(
        self,
        app: App,
        settings: Settings,
        *,
        log: EventLog,
        serde: Serde,
        worker_id: str | None = None,
        session_timeout_ms: int = 10_000,
        checkpoint_interval_s: float = 2.0,
        feed: CommandFeed | None = None,
        shared_limits: bool = True,
        stream: StreamOut | None = None,
        whatif_apps: Mapping[str, App] | None = None,
    ) -> None:
        """``shared_limits=False`` keeps every limit whole in this process (a local run). ``stream``:
        where what runs do is published for watchers and queries (runtime.worker.streaming); none
        (a local run) publishes nothing. ``whatif_apps``: code versions (module:app -> App) this
        worker also runs what-ifs of (``agentlog whatif --app``; runtime.worker.versions)."""
        self.app = app
        self.settings = settings
        self.log = log
        self.serde = serde.seal_over(log)
        self.worker_id = worker_id or socket.gethostname()
        self.owned: dict[int, OwnedPartition] = {}
        self._stopping = False
        self.readiness = Readiness()  # /readyz (runtime.worker.health)
        self.resources = ResourceWatch(settings, self.readiness)  # short of descriptors, threads, memory
        self.ops: WorkerOps | None = None  # the metrics and probes port, while serving (metrics_port)
        self.batcher = TurnBatcher(settings, serde, log)
        self.executor = Executor(app, settings, log, self.batcher, self._lose)
        if whatif_apps:
            self.executor.hold_versions(whatif_apps)
        self.stream_out = stream
        if stream is not None:
            self.executor.stream = RunStreams(settings, stream)
        self.shared_permits = self._share_limits(session_timeout_ms) if shared_limits else None
        self.commands = CommandHandler(app, serde, self.batcher, self.executor, self.worker_id)
        # At most run_cache_busy_max (else run_cache_size) busy runs: further submissions and wakes
        # wait (runtime.worker.admission).
        self.admission = Admission(
            settings.run_cache_busy_max or settings.run_cache_size,
            self.executor.runs,
            self.serde,
            settings.partitions,
            self.commands.handle_now,
            self._admission_failed,
        )
        self.commands.admission = self.admission
        self.takeover = Takeover(app, settings, serde, log, self.executor, self.worker_id)
        # Records the owner did not write, noticed and their runs parked (needs the chain key).
        self.foreign = ForeignRecords(self.executor, self.owned.get) if self.batcher.chain_key else None
        self.checkpointer = Checkpointer(
            settings, serde, log, self.worker_id, checkpoint_interval_s, self.executor.still_owner, self._lose
        )
        # A feed may be joined before the worker is built (a restarted worker joins first).
        self.session_timeout_ms = session_timeout_ms
        self.feed = feed or log.join(self.worker_id, session_timeout_ms)
        self.feed.bind(self._on_assign, self._on_revoke)

    def _share_limits(self, session_timeout_ms: int) -> SharedPermits | None:
        """The app's limits shared with the other workers (docs/permits.md); an app without limits
        builds nothing and pays nothing."""
        if not self.executor.limits:
            return None
        lease_s = self.settings.limits_lease_s
        if lease_s * 1000 > session_timeout_ms:
            raise ConfigError(
                f"limits_lease_s ({lease_s:g} s) is longer than the workers' session timeout "
                f"({session_timeout_ms} ms): a worker killed holding permits would cost the others more "
                "than the group takes to notice it; set limits_lease_s to at most the session timeout"
            )
        shared = SharedPermits(
            self.executor.limits, self.log, self.settings.limits_topic, self.worker_id, lease_s=lease_s
        )
        self.executor.permits = shared
        return shared

    # ------------------------------------------------------------------------------ serving
    def run(self, *, tune_gc: bool = False) -> None:
        """Serve until SIGTERM/SIGINT, on uvloop (its loop overhead per step is about half of
        asyncio's). ``tune_gc`` (the ``agentlog worker`` entry point sets it) tunes the process's
        garbage collector for a worker: every step allocates events, dicts and futures that die
        young, and at the default threshold the cyclic collector walks the live runs' histories
        thousands of times a second. What start-up loaded is frozen out of its walks; cycles
        are still collected, 200,000 allocations apart. A young collection walks whatever the
        young objects still alive refer to -- with framework agents running, their transcripts --
        so one at 200,000 costs about twice one at 50,000, and a fourth as many of them cost a
        busy worker half the time; at most 200,000 objects of cyclic garbage wait for one."""
        import uvloop

        if tune_gc:
            import gc

            gc.freeze()
            gc.set_threshold(200_000, 20, 20)
            gc.enable()  # the worker command pauses collection while it starts
        uvloop.run(self.serve())

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        """The loop: poll commands, apply them, checkpoint; until ``stop`` or ``self.stop()``."""
        loop = asyncio.get_running_loop()
        if self.shared_permits is not None:
            await self.shared_permits.start()  # before any partition (and the coordinator's) arrives
        pool = CallPool(loop, on_exhausted=self.resources.fatal)
        self.executor.start(pool, self.log.ownership(loop, self._is_claim))
        if self.foreign is not None and self.executor.ownership is not None:
            self.executor.ownership.notice_foreign(self.foreign.check, self.foreign.found)
        self.resources.start()
        self._open_ops()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # not the main thread: asyncio raises RuntimeError there, uvloop ValueError
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
        log.info(json.dumps({"event": "worker_started", "worker": self.worker_id, "pid": os.getpid()}))
        # Commands arrive from the intake's thread as they are fetched (runtime.worker.intake);
        # the loop itself only wakes every tick to checkpoint and to look for failures.
        intake = CommandIntake(
            self.feed, loop, self._deliver_all, self._on_assign, self._on_revoke, self._rejoin
        )
        stagemarks.start("serving")
        self.admission.feed = intake  # a partition with too many held commands is paused
        intake.start()
        try:
            while not self._stopping and not (stop is not None and stop.is_set()):
                if intake.failure is not None:
                    self.readiness.failed(str(intake.failure))
                    note_lacking("the commands intake", intake.failure)
                    raise intake.failure  # a feed error or an assignment that failed, as polled
                self.checkpointer.maybe_checkpoint(list(self.owned.values()), intake)
                failure = self.log.failure or self.executor.failure or self.resources.failure
                if failure is not None:
                    # A record nobody watched was lost: what follows it cannot be trusted. Stop;
                    # a restarted worker rebuilds from what the log really holds.
                    self.readiness.failed(failure)
                    raise WorkerError(f"stopping: {failure}")
                self.resources.loop_turned = time.monotonic()  # the watch sees a loop that stops turning
                await asyncio.sleep(_TICK_S)
        finally:
            self.readiness.stopping()
            try:
                await intake.stop()
                await self._shutdown()
            finally:
                self.resources.stop()
                if self.ops is not None:
                    self.ops.stop()
                    self.ops = None

    def stop(self) -> None:
        self._stopping = True
        self.readiness.stopping()

    def _open_ops(self) -> None:
        """The metrics and probes port (``metrics_port``; runtime.worker.ops), before any partition
        arrives, so ``/readyz`` answers "not ready" through the first claims and rebuilds."""
        port = self.settings.metrics_port
        if port is None:
            return
        from runtime.worker.ops import WorkerOps  # prometheus-client loads only when a port is asked for

        self.ops = WorkerOps(
            self.settings,
            self.log,
            self.serde,
            self.executor.metrics,
            lambda: list(self.owned.values()),
            self.readiness,
            port,
            self.resources,
        ).start()
        log.info(json.dumps({"event": "metrics_listening", "worker": self.worker_id, "port": self.ops.port}))

    def _deliver_all(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self._deliver(delivery)

    def _deliver(self, delivery: Delivery) -> None:
        if delivery.error is not None:
            log.warning("commands feed: %s", delivery.error)
            return
        owned = self.owned.get(delivery.partition)
        if owned is not None:
            self.commands.handle(owned, delivery)

    def _admission_failed(self, why: str) -> None:
        self.executor.failure = self.executor.failure or why  # the loop stops on it

    def _rejoin(self) -> CommandFeed:
        """A new membership of the workers' group, after the group fenced the last one."""
        self.readiness.fenced("membership fenced")
        self.feed = self.log.join(self.worker_id, self.session_timeout_ms)
        return self.feed

    def _is_claim(self, partition: int, value: bytes) -> bool:
        return self.takeover.forgeries.is_claim(partition, value)

    async def _shutdown(self) -> None:
        tasks = [t for owned in self.owned.values() for t in owned.tasks]
        for task in tasks:
            task.cancel()
        for owned in self.owned.values():
            owned.stop_timers()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.shared_permits is not None:
            await self.shared_permits.close()  # what it held goes back to the others at once
        self.batcher.send()  # results recorded before the stop are not left unsent
        if self.executor.stream is not None:
            self.executor.stream.flush()  # what watchers have not seen yet, within a few seconds
        try:
            self.log.flush()
        finally:
            if self.serde.sealer is not None:
                self.serde.sealer.keys.close()
            if self.executor.ownership is not None:
                self.executor.ownership.close()
            if self.executor.pool is not None:
                self.executor.pool.close()
            self.feed.close()
            log.info(json.dumps({"event": "worker_stopped", "worker": self.worker_id}))

    # ------------------------------------------------------------------------------ partitions
    def _on_assign(self, partitions: list[int]) -> dict[int, int]:
        stagemarks.start("assigned")
        self.readiness.assigning(partitions)
        started = time.perf_counter()
        epochs = self.takeover.claim_all(partitions)
        stagemarks.start("claims acked")
        starts: dict[int, int] = {}
        for partition, owned in self.takeover.take_all(epochs).items():
            self.owned[partition] = owned
            if self.executor.ownership is not None:
                self.executor.ownership.watch(partition, owned.epoch)
            starts[partition] = owned.next_command
            if partition == 0 and self.shared_permits is not None:
                self.shared_permits.lead(owned.epoch)  # partition 0's owner coordinates the limits
        if partitions:
            self.executor.metrics.takeover(time.perf_counter() - started, len(partitions))
            if self.serde.sealer is not None:
                # new runs' keys cached as they are written, not read on each run's first command
                self.serde.sealer.keys.follow(partitions)
        self.readiness.assigned()
        stagemarks.start("runs resumed")
        return starts

    def _on_revoke(self, partitions: list[int]) -> None:
        for partition in partitions:
            self._lose(partition, "revoked")

    def _lose(self, partition: int, why: str) -> None:
        owned = self.owned.pop(partition, None)
        if owned is None:
            return
        owned.lost = True
        if self.foreign is not None:
            self.foreign.forget(partition)
        self.readiness.lost(partition, why)
        if partition == 0 and self.shared_permits is not None:
            self.shared_permits.step_down()
        if self.executor.ownership is not None:
            self.executor.ownership.unwatch(partition)
        for task in owned.tasks:
            task.cancel()
        owned.stop_timers()
        self.executor.runs.drop_partition(owned)
        log.warning(json.dumps({"event": "partition_lost", "partition": partition, "why": why}))
