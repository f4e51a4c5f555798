"""Workers on the in-memory log, inside one event loop: the worker's semantics without a broker.

Waits are on what the log holds (``until``, support.wait's, imported from here too), never fixed sleeps.
"""

from __future__ import annotations

import asyncio

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import Event, PartitionCheckpoint
from runtime.log.schemas.serde import Serde
from runtime.run_status import RunStatus
from runtime.worker.loop import Worker
from runtime.worker.rebuild import checkpoint_key
from runtime.workflow.app import App
from support.wait import until

__all__ = ["SETTINGS", "Harness", "until"]

SETTINGS = Settings(partitions=1)


class Harness:
    """One in-memory deployment: its log, an offline serde, a client, and the workers started on it."""

    def __init__(self, app: App, serde: Serde | None = None, settings: Settings = SETTINGS) -> None:
        self.app = app
        self.settings = settings
        self.log = MemoryLog(self.settings)
        self.serde = serde or Serde.offline(self.settings)
        self.client = Client(self.settings, identity="test", log=self.log, serde=Serde.offline(self.settings))
        self.running: dict[str, tuple[Worker, asyncio.Task[None]]] = {}

    def start(
        self, worker_id: str = "w1", *, serde: Serde | None = None, checkpoint_interval_s: float = 3600
    ) -> Worker:
        """A worker serving in this loop; it joins the group last, so it owns every partition."""
        worker = Worker(
            self.app,
            self.settings,
            log=self.log,
            serde=serde or self.serde,
            worker_id=worker_id,
            checkpoint_interval_s=checkpoint_interval_s,
        )
        self.running[worker_id] = (worker, asyncio.get_running_loop().create_task(worker.serve()))
        return worker

    async def stop(self, worker_id: str = "w1") -> None:
        worker, task = self.running.pop(worker_id)
        worker.stop()
        await task

    async def stop_all(self) -> None:
        for worker_id in list(self.running):
            await self.stop(worker_id)

    def task(self, worker_id: str = "w1") -> asyncio.Task[None]:
        return self.running[worker_id][1]

    def events(self, run_id: str) -> list[Event]:
        return [logged.event for logged in self.client.run(run_id).events()]

    def types(self, run_id: str) -> list[str]:
        return [e.type for e in self.events(run_id)]

    def status(self, run_id: str) -> RunStatus:
        return self.client.run(run_id).status()

    def checkpoints(self) -> list[PartitionCheckpoint]:
        records = self.log.read(self.settings.checkpoints_topic, 0, keep=lambda k: k == checkpoint_key(0))
        decoded = [self.client.serde.decode(r.value or b"") for r in records]
        return [c for c in decoded if isinstance(c, PartitionCheckpoint)]

    async def ended(self, run_id: str, timeout: float = 5.0) -> RunStatus:
        return await until(
            lambda: (s := self.status(run_id)).status not in ("running", "unknown") and s,
            timeout,
            f"run {run_id} to end",
        )
