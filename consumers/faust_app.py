"""The faust-streaming driver: a faust app whose one agent feeds the events topic into ``SinkCore``.

faust is built for at-least-once processing with offsets committed to a consumer group; the sink
needs neither, because its position lives in ClickHouse. Three adjustments make faust fit:

- **read_committed**: faust asks aiokafka for it only in exactly-once mode, so the consumer
  thread sets it on the aiokafka consumer it creates (an integration test checks that records
  of an aborted transaction never land through this driver);
- **resume from ClickHouse**: faust seeks to the group's committed offsets at every assignment
  and whenever its flow restarts; the consumer thread answers those seeks with the core's
  positions instead, so what the store holds decides where reading starts;
- **no blocking in the event loop**: each ``take_events`` batch is handed to the core in a
  one-thread executor, where the core may wait on backpressure without stalling faust.

faust commits the offsets of batches it has processed as usual; nothing reads them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

import faust
from aiokafka import TopicPartition  # faust depends on it; untyped (see pyproject mypy overrides)
from faust.transport.drivers import aiokafka as faust_aiokafka

from runtime.config import Settings

from .core import SinkConfig, SinkCore

log = logging.getLogger("agentlog.sink.faust")


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # faust sets this only for exactly-once apps
        return consumer

    async def seek_to_committed(self) -> Mapping[Any, int]:
        positions = dict(await super().seek_to_committed())
        app = cast(SinkApp, self.app)
        for tp in self.assignment():
            if tp.topic != app.sink_topic:
                continue
            offset = app.sink_core.next_offset(tp.partition)
            kafka_tp = TopicPartition(tp.topic, tp.partition)
            if offset is None:
                await self.seek_to_beginning(kafka_tp)
                positions.pop(tp, None)
            else:
                self.seek(kafka_tp, offset)
                positions[tp] = offset
        return positions


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class SinkApp(faust.App):
    """A faust app bound to one ``SinkCore``."""

    sink_core: SinkCore
    sink_topic: str

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)


def _broker_urls(bootstrap: str) -> str:
    return ";".join(f"kafka://{server.strip()}" for server in bootstrap.split(",") if server.strip())


def _batch_rows(config: SinkConfig) -> int:
    """faust's own batches: capped, since its stream buffer holds that many heavy Event objects
    (and at faust's few thousand events per second, a larger batch never fills anyway)."""
    return min(config.batch_rows, 50_000)


def build_app(
    settings: Settings,
    core: SinkCore,
    topic: str,
    config: SinkConfig,
    datadir: str,
    executor: concurrent.futures.Executor,
    group: str,
) -> SinkApp:
    """The faust app: one agent, raw bytes, batches of ``config.batch_rows`` or ``flush_interval``."""
    app = SinkApp(
        group,
        broker=_broker_urls(settings.bootstrap_servers),
        store="memory://",
        datadir=datadir,
        web_enabled=False,
        topic_partitions=settings.partitions,
        consumer_auto_offset_reset="earliest",
        # One sink per store: a fixed member id lets a restarted sink take over at once instead of
        # waiting out the session of the one that was killed.
        consumer_group_instance_id=group,
        broker_session_timeout=20.0,
        stream_buffer_maxsize=max(4096, _batch_rows(config)),
        broker_max_poll_records=10_000,
        key_serializer="raw",
        value_serializer="raw",
    )
    app.sink_core = core
    app.sink_topic = topic
    channel = app.topic(topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

    def take(records: Sequence[tuple[int, int, bytes | None, bytes | None]]) -> None:
        for partition, offset, key, value in records:
            core.add(partition, offset, key, value)
        core.hand_off()

    @app.agent(channel, name="agentlog-sink")
    async def sink(stream: Any) -> None:
        loop = asyncio.get_running_loop()
        async for events in stream.take_events(_batch_rows(config), within=config.flush_interval):
            records = [
                (e.message.partition, e.message.offset, e.message.key, e.message.value) for e in events
            ]
            await loop.run_in_executor(executor, take, records)

    return app


def run_faust(
    settings: Settings,
    core: SinkCore,
    stop: threading.Event,
    topic: str | None = None,
    group: str | None = None,
) -> None:
    """Run the faust app until ``stop`` is set or the app crashes; the core is started first.

    ``group`` names the faust app and its consumer group: one per (topic, store), since every
    store needs every partition.
    """
    topic = topic or settings.events_topic
    group = group or f"agentlog-sink-{topic}"
    core.start()
    # One thread touches the core's open batch: the executor; the event loop never does.
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentlog-sink-faust")
    crashed = True
    try:
        with tempfile.TemporaryDirectory(prefix="agentlog-faust-") as datadir:
            app = build_app(settings, core, topic, core.config, datadir, executor, group)
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(_serve(app, core, stop))
                crashed = False
            finally:
                loop.close()
    finally:
        executor.shutdown(wait=True)
        core.close(flush=not crashed)


async def _serve(app: SinkApp, core: SinkCore, stop: threading.Event) -> None:
    await app.start()
    try:
        while not stop.is_set():
            if app.should_stop or app.crashed:
                raise RuntimeError(f"the faust app stopped: {app.crash_reason!r}")
            core.raise_if_failed()
            await asyncio.sleep(0.1)
    finally:
        await app.stop()
