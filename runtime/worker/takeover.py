"""Taking a partition: claim it, rebuild its runs, resume them where they were."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from runtime import stagemarks
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import Event, RunParked, RunStarted
from runtime.log.schemas.serde import Serde
from runtime.worker.commands import now_ms
from runtime.worker.execution import Executor
from runtime.worker.heap import release_free_heap
from runtime.worker.held_commands import CommandWindow
from runtime.worker.partition import Evicted, OwnedPartition
from runtime.worker.partition_forgery import PartitionForgeries
from runtime.worker.rebuild import RebuiltPartition, claim, rebuild_partitions
from runtime.worker.resources import wake_failure
from runtime.worker.run_cache import UNREPLAYED
from runtime.workflow.activation import Wake
from runtime.workflow.app import App
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Stamp

log = logging.getLogger("agentlog.worker")


class Takeover:
    """Claims partitions and rebuilds the state of their non-terminal runs."""

    def __init__(
        self, app: App, settings: Settings, serde: Serde, log: EventLog, executor: Executor, worker_id: str
    ) -> None:
        self.app = app
        self.settings = settings
        self.serde = serde
        self.log = log
        self.executor = executor
        self.worker_id = worker_id
        self.forgeries = PartitionForgeries(settings, serde, executor.metrics)

    def claim_all(self, partitions: list[int]) -> dict[int, int]:
        """Claim every partition at once (each rebuild then waits only for its own); the epochs."""
        claims = {
            p: claim(self.settings, self.serde, self.log, p, self.worker_id, self.forgeries.own)
            for p in partitions
        }
        return {p: future.result(timeout=30) for p, future in claims.items()}

    def take_all(self, epochs: dict[int, int]) -> dict[int, OwnedPartition]:
        """Each partition's state as of its epoch, its runs replayed and resumed; the partitions'
        records are read together (runtime.worker.rebuild.rebuild_partitions)."""
        started = time.perf_counter()
        rebuilt = rebuild_partitions(self.settings, self.serde, self.log, epochs)
        read_ms = (time.perf_counter() - started) * 1000
        stagemarks.start("partitions read")
        taken = {partition: self._resume(rebuilt[partition], read_ms) for partition in epochs}
        del rebuilt
        release_free_heap()  # what the read and the replays freed, out of the worker's RSS
        return taken

    def _resume(self, rebuilt: RebuiltPartition, read_ms: float) -> OwnedPartition:
        started = time.perf_counter()
        partition = rebuilt.partition
        stamp = Stamp(now_ms, self.worker_id, rebuilt.epoch)
        # Commands resume at the checkpoint's commit point; those handled since are skipped
        # (runtime.worker.admission: a command held there may precede them).
        owned = OwnedPartition(partition, rebuilt.epoch, stamp, rebuilt.commands_from, rebuilt.known_runs)
        owned.window = CommandWindow.of(
            rebuilt.commands_from, rebuilt.commands_offset, rebuilt.commands_handled, rebuilt.started_by
        )
        in_doubt: list[dict[str, Any]] = []
        for run_id, events in rebuilt.active.items():
            started_event = events[0]
            assert isinstance(started_event, RunStarted)
            owned.first_offsets[run_id] = rebuilt.first_offsets[run_id]
            owned.sizes[run_id] = rebuilt.sizes.get(run_id, [0, 0])
            owned.records[run_id] = rebuilt.records.get(run_id, [])
            if run_id in rebuilt.chain_tips:
                owned.chain_tips[run_id] = rebuilt.chain_tips[run_id]
            if run_id in rebuilt.snapshots:
                owned.snapshots[run_id] = rebuilt.snapshots[run_id]
            if run_id in rebuilt.unloadable:
                self._park(owned, started_event.workflow, events[-1], rebuilt.unloadable[run_id])
                continue
            try:
                run = self.executor.versions.new_run(  # a what-if's with its code version
                    started_event, stamp, new_run, history_warn_events=self.settings.history_warn_events
                )
            except AgentlogError as error:  # e.g. a workflow this code no longer has: parked, visibly
                self._park(owned, started_event.workflow, events[-1], str(error))
                continue
            try:
                woken = run.activate(Wake(events))  # replayed, then live: calls in flight run again
            except Exception as error:  # not waited on: parked with why (runtime.worker.resources)
                run.close()
                self._park(owned, started_event.workflow, events[-1], wake_failure(run_id, error))
                continue
            in_doubt += [{"run": run_id, **d.__dict__} for d in woken.view.in_doubt]
            for doubt in woken.view.in_doubt:
                self.executor.metrics.call_in_doubt(doubt.kind, doubt.name)
            owned.runs[run_id] = run
            self.executor.flush(owned, run, woken)
        for run_id, timers in rebuilt.waiting.items():  # indexed, not replayed: woken when reached
            owned.first_offsets[run_id] = rebuilt.first_offsets[run_id]
            owned.sizes[run_id] = rebuilt.sizes.get(run_id, [0, 0])
            owned.records[run_id] = rebuilt.records[run_id]
            if run_id in rebuilt.chain_tips:
                owned.chain_tips[run_id] = rebuilt.chain_tips[run_id]
            if run_id in rebuilt.snapshots:
                owned.snapshots[run_id] = rebuilt.snapshots[run_id]
            owned.evicted[run_id] = Evicted(UNREPLAYED, timers)
        self.executor.runs.arm_evicted(owned)
        for record in rebuilt.forged_partition_records:  # runtime.worker.partition_forgery
            self.forgeries.name(record, record.split("(", 1)[1].split(")", 1)[0])
        for run_id, why in rebuilt.forged_ended.items():  # runtime.worker.foreign: named, not re-run
            self.executor.metrics.foreign_records["named"] = (
                self.executor.metrics.foreign_records.get("named", 0) + 1
            )
            log.error(
                json.dumps({"event": "foreign_record", "run": run_id, "record": why, "action": "named"})
            )
        for run_id, sent in rebuilt.to_follow_up.items():  # runtime.worker.children: may not have been sent
            owned.first_offsets[run_id] = rebuilt.first_offsets[run_id]
            self.executor.children.resend(owned, run_id, sent)
        for run_id, (ended, workflow) in rebuilt.to_continue.items():
            # Its successor may not have been submitted before the crash: submit (again).
            owned.first_offsets[run_id] = rebuilt.first_offsets[run_id]
            self.executor.continuer.submit(
                owned, ended, workflow, child_of=rebuilt.continued_child_of.get(run_id)
            )
        log.info(
            json.dumps(
                {
                    "event": "partition_taken",
                    "to_continue": sorted(rebuilt.to_continue),
                    "partition": partition,
                    "epoch": rebuilt.epoch,
                    "records_read": rebuilt.records_read,
                    "records_decoded": rebuilt.records_decoded,
                    "fenced": rebuilt.fenced,
                    "active_runs": len(rebuilt.active),
                    "indexed_waiting": len(rebuilt.waiting),  # not replayed (runtime.worker.run_cache)
                    "from_snapshots": len(rebuilt.snapshots),
                    "commands_offset": rebuilt.commands_offset,
                    "in_doubt": in_doubt,
                    # the read of every partition taken with this one, and this one's replay
                    "read_ms": round(read_ms, 1),
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                }
            )
        )
        return owned

    def _park(self, owned: OwnedPartition, workflow: str, last: Event, reason: str) -> None:
        parked = RunParked(
            run_id=last.run_id,
            reason=f"cannot resume on this worker: {reason}",
            seq=last.seq + 1,
            occurred_at=now_ms(),
            worker=self.worker_id,
            epoch=owned.epoch,
        )
        self.executor.batcher.append(owned, [parked])
        self.executor.metrics.run_ended(workflow, "parked")
        owned.forget(last.run_id)
        if self.executor.batcher.serde.sealer is not None:
            self.executor.batcher.serde.sealer.forget_run(last.run_id)
