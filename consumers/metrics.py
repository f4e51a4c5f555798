"""The sink's operations port (``agentlog sink --metrics-port``): Prometheus metrics and probes.

Counters come from ``SinkCore.stats`` (the writer thread updates them once per batch); how far the
store is behind the log (``agentlog_sink_records_behind``) is the topic's end offsets, sampled in
a thread of its own (runtime.ops.sampler), minus the next offset the store holds per partition.
Ready once the store is open and its positions read (the core started), until the sink stops or
its writer failed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.config import Settings
from runtime.log.kafka.reader import offset_bounds
from runtime.ops.sampler import Sampler
from runtime.ops.server import OpsServer

from .core import SinkCore, SinkStats
from .direct import partitions_of

# How long a sample of the topic's end offsets may take (a scrape never waits for it).
SAMPLE_PATIENCE_S = 5.0


class SinkCollector(Collector):
    def __init__(self, core: SinkCore | None, behind: Sampler, topic: str) -> None:
        self.core = core  # None until the store is open (SinkOps.attach)
        self.behind = behind
        self.topic = topic

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self.core.stats if self.core is not None else SinkStats()
        for name, text, value in (
            ("agentlog_sink_rows_written", "Rows the sink wrote to the store", stats.rows_written),
            (
                "agentlog_sink_batches_written",
                "Batches (inserts) the sink wrote to the store",
                stats.batches_written,
            ),
            (
                "agentlog_sink_undecodable",
                "Records the sink could not decode (kept as raw rows)",
                stats.undecodable,
            ),
            ("agentlog_sink_write_retries", "Store writes that failed and were tried again", stats.retries),
            ("agentlog_sink_write_seconds", "Time spent in successful store writes", stats.write_seconds),
        ):
            family = CounterMetricFamily(name, text, labels=["topic"])
            family.add_metric([self.topic], value)
            yield family
        behind = GaugeMetricFamily(
            "agentlog_sink_records_behind",
            "Records of the topic not yet in the store, per partition (end offset minus the store's next offset)",
            labels=["topic", "partition"],
        )
        for partition, count in sorted(self.behind.value.items()):
            behind.add_metric([self.topic, str(partition)], count)
        yield behind


class SinkOps:
    """The port, the end-offsets sampler and their Kafka client, for one sink process. Opened
    before the store's lock is taken: a sink waiting for another to let go is alive, not ready."""

    def __init__(self, settings: Settings, topic: str, stop: threading.Event, port: int) -> None:
        self.core: SinkCore | None = None  # attached once the store is open
        self.stop_event = stop
        self.topic = topic
        # Its own client: the sink's consumer belongs to the driver's thread.
        self._reader = Consumer(
            {**settings.kafka_common(), "group.id": "agentlog-sink-metrics", "enable.auto.commit": False}
        )
        self.behind = Sampler("sink_records_behind", self._records_behind)
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.collector = SinkCollector(None, self.behind, topic)
        self.registry.register(self.collector)
        self.server = OpsServer(self.registry, self.readiness, port, settings.metrics_host)

    @property
    def port(self) -> int:
        return self.server.port

    def attach(self, core: SinkCore) -> None:
        """The store is open (its lock held, migrated): ``core`` is what the metrics count."""
        self.core = self.collector.core = core

    def readiness(self) -> str | None:
        core = self.core
        if self.stop_event.is_set():
            return "stopping"
        if core is None:
            return "starting: waiting for the analytics store (its lock, its migrations)"
        if core.failure is not None:
            return f"failing: {core.failure}"
        if not core.started:
            return "starting: the store's positions are not read yet"
        return None

    def _records_behind(self) -> dict[int, int]:
        core = self.core
        if core is None:
            return {}
        partitions = partitions_of(self._reader, self.topic, timeout=SAMPLE_PATIENCE_S)
        bounds = offset_bounds(self._reader, self.topic, partitions, SAMPLE_PATIENCE_S)
        stored = core.durable_offsets()
        # A partition the store holds nothing of is behind by everything it still holds.
        return {p: max(0, high - stored.get(p, low)) for p, (low, high) in bounds.items()}

    def start(self) -> SinkOps:
        self.behind.start()
        self.server.start()
        return self

    def close(self) -> None:
        self.server.stop()
        self.behind.stop()
        self._reader.close()
