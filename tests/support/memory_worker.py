"""A real worker serving an app on the in-memory log, in a thread of this process, with a client
beside it: for tests of what a whole run records, without services."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.models.deltas import DeltaSink, deltas_to
from runtime.worker import execution
from runtime.worker.loop import Worker
from runtime.workflow.app import App


@contextmanager
def _sink_around_attempts(sink: DeltaSink) -> Iterator[None]:
    """Bind ``sink`` around each call attempt of the worker, where a live model call streams (the
    worker's own sink, if it sets one around the attempt, is the outer one: this one is read)."""
    attempt = execution.attempt_once

    async def attempt_with_sink(*args: Any, **kwargs: Any) -> Any:
        with deltas_to(sink):
            return await attempt(*args, **kwargs)

    execution.attempt_once = attempt_with_sink  # type: ignore[assignment]  # a test seam
    try:
        yield
    finally:
        execution.attempt_once = attempt


@contextmanager
def serving(
    app: App, settings: Settings, *, sink: DeltaSink | None = None, whatif_apps: dict[str, App] | None = None
) -> Iterator[tuple[Client, MemoryLog]]:
    """``app`` served by one worker on a fresh in-memory log; the client and the log. The worker
    stops (and its thread is joined) on leaving. ``sink``: where its live model calls send their
    deltas (``runtime.models.deltas``), bound around each call attempt. ``whatif_apps``: the code
    versions the worker also runs what-ifs of (``agentlog worker --whatif-app``)."""
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(
        app,
        settings,
        log=log,
        serde=serde,
        worker_id="w",
        checkpoint_interval_s=3600,
        shared_limits=False,
        whatif_apps=whatif_apps,
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    with _sink_around_attempts(sink) if sink is not None else nullcontext():
        thread.start()
        try:
            with Client(settings, identity="t", log=log, serde=serde) as client:
                yield client, log
        finally:
            worker.stop()
            thread.join(timeout=10)
