"""``agentlog sink``: one process that owns the analytics store and copies the events topic into it.

Start order: take the store's lock (embedded store), open the writer's client, start the query
port and advertise it, then run the driver. Stop order is the reverse, after the driver has
written its last batch. SIGTERM and SIGINT ask for that orderly stop; SIGKILL skips it, which is
safe: the lock dies with the process and the next sink resumes from what the store holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from analytics.migrations import migrate
from analytics.server import QueryServer
from analytics.store import Endpoint, StoreLocation, StoreLock, open_client, parse_dsn
from runtime.config import Settings
from runtime.log.kafka.access import check_access
from runtime.log.schemas.registry import registry_client

from .claims import store_claims
from .core import SinkConfig, SinkCore, SinkStats
from .direct import run_direct
from .payloads import PayloadCopier
from .registry import WriterSchemas
from .store_writer import StoreWriter

if TYPE_CHECKING:
    from .metrics import SinkOps

log = logging.getLogger("agentlog.sink")

DRIVERS = ("faust", "direct")
LOCK_WAIT = 60.0


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping the sink after the current batch", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _query_port(location: StoreLocation) -> Iterator[Endpoint | None]:
    """Serve read-only queries for the store this process holds (embedded stores only)."""
    if not location.embedded:
        yield None
        return
    client = open_client(location)
    server = QueryServer(client)
    endpoint = server.start()
    endpoint.write(location.endpoint_path)
    try:
        yield endpoint
    finally:
        server.stop()
        if Endpoint.read(location.endpoint_path) == endpoint:
            location.endpoint_path.unlink(missing_ok=True)
        client.close()


@contextlib.contextmanager
def _store_lock(location: StoreLocation) -> Iterator[None]:
    if not location.embedded:
        yield
        return
    lock = StoreLock(location)
    if not lock.try_acquire():
        log.info("waiting for the analytics store lock held by pid %s", lock.holder())
        lock.acquire(LOCK_WAIT)
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _payload_copier(
    settings: Settings, location: StoreLocation, stop: threading.Event
) -> Iterator[PayloadCopier]:
    """The payloads topic copied beside the events (consumers.payloads), on its own client;
    stopped (``stop``) and joined when the events driver returns."""
    client = open_client(location)
    copier = PayloadCopier(settings, client, stop)
    copier.start()
    try:
        yield copier
    finally:
        stop.set()
        copier.join()
        client.close()


@contextlib.contextmanager
def _ops_port(settings: Settings, topic: str, stop: threading.Event) -> Iterator[SinkOps | None]:
    """/metrics, /healthz and /readyz (consumers.metrics) while the sink runs, if ``metrics_port``
    is set; open before the store's lock is taken, so a sink waiting for it is alive, not ready."""
    if settings.metrics_port is None:
        yield None
        return
    from .metrics import SinkOps  # prometheus-client loads only when a port is asked for

    ops = SinkOps(settings, topic, stop, settings.metrics_port).start()
    log.info("sink: metrics and probes on port %s", ops.port)
    try:
        yield ops
    finally:
        ops.close()


def sink_group(topic: str, location: StoreLocation) -> str:
    """The consumer group (faust) of the sink copying ``topic`` into this store."""
    store = hashlib.sha1(str(location.path or location.dsn).encode()).hexdigest()[:8]  # a name, not security
    return f"agentlog-sink-{topic}-{store}"


def run_sink(
    settings: Settings,
    *,
    dsn: str | None = None,
    driver: str = "faust",
    config: SinkConfig | None = None,
    stop: threading.Event | None = None,
    topic: str | None = None,
    on_ready: Callable[[Endpoint | None], None] | None = None,
    tune_gc: bool = True,
) -> SinkStats:
    """Run the sink until ``stop`` is set (or a signal arrives); return what it wrote.

    ``tune_gc``: the direct driver collects garbage rarely while it runs (:mod:`consumers.gctune`);
    on by default because this is the sink's entry point (``agentlog sink``). A program that
    embeds the sink and keeps its own collector settings passes False."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown sink driver {driver!r}; choose one of {', '.join(DRIVERS)}")
    location = parse_dsn(dsn or settings.analytics_dsn)
    topic = topic or settings.events_topic
    stop = stop or threading.Event()
    # Refused SASL credentials, or a user without the sink's permissions, end the sink here, before
    # it takes the store's lock or creates the store, and before its two Kafka clients (events,
    # payloads) would wait on them forever.
    check_access(settings, "sink")
    with _stop_on_signals(stop), _ops_port(settings, topic, stop) as ops, _store_lock(location):
        client = open_client(location)
        try:
            migrate(client)  # before the payloads copier writes its table
            writer = StoreWriter(
                client, topic, WriterSchemas(registry_client(settings)), store_claims(settings.verify_key)
            )
            core = SinkCore(writer, topic, config)
            if ops is not None:
                ops.attach(core)
            with (
                _query_port(location) as endpoint,
                _payload_copier(settings, location, stop) as copier,
            ):
                if on_ready is not None:
                    on_ready(endpoint)
                log.info("sink: %s -> %s (driver %s)", topic, location.dsn, driver)
                if driver == "direct":
                    run_direct(settings, core, stop, topic, tune_gc=tune_gc)
                else:
                    from .faust_app import run_faust  # faust is heavy to import; only when used

                    run_faust(settings, core, stop, topic, sink_group(topic, location))
            if copier.error is not None:
                raise copier.error
            return core.stats
        finally:
            client.close()
