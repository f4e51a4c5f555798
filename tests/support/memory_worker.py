"""A real worker serving an app on the in-memory log, in a thread of this process, with a client
beside it: for tests of what a whole run records, without services."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App


@contextmanager
def serving(app: App, settings: Settings) -> Iterator[tuple[Client, MemoryLog]]:
    """``app`` served by one worker on a fresh in-memory log; the client and the log. The worker
    stops (and its thread is joined) on leaving."""
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(
        app, settings, log=log, serde=serde, worker_id="w", checkpoint_interval_s=3600, shared_limits=False
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="t", log=log, serde=serde) as client:
            yield client, log
    finally:
        worker.stop()
        thread.join(timeout=10)
