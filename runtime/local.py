"""Running a workflow in this process on the in-memory log: no Kafka, no registry.

For trying an agent out, for tests of workflow code, and for checking an installation: the same
worker, machine and client as in production, on ``runtime.log.port.memory.MemoryLog`` with schema ids
taken from the local catalog (``Serde.offline``). Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App


def run_local(app: App, workflow: str, input: Any, *, timeout: float = 60.0) -> Any:
    """Run ``workflow`` of ``app`` with ``input`` to its end; its result.

    Raises ``RunError`` (with the status and reason) if the run did not complete, as
    ``RunHandle.result`` does."""
    settings = Settings(partitions=1)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    # One process: every limit whole in it (LocalPermits), no coordination to share them.
    worker = Worker(
        app,
        settings,
        log=log,
        serde=serde,
        worker_id="local",
        checkpoint_interval_s=3600,
        shared_limits=False,
    )
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(worker.serve())
        except BaseException as error:  # handed to the caller below, not lost with the thread
            failure.append(error)

    thread = threading.Thread(target=serve, name="agentlog-local-worker", daemon=True)
    thread.start()
    try:
        with Client(settings, identity="local", log=log, serde=serde) as client:
            return client.submit(workflow, input).result(timeout=timeout)
    finally:
        worker.stop()
        thread.join(timeout=10)
        if failure:
            raise failure[0]
