"""The resource watch's last sample (runtime.worker.resources) as Prometheus gauges, built at each
scrape: imported only by the operations port (runtime.worker.ops), with prometheus-client."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.worker.resources import ResourceWatch


class ResourceCollector(Collector):
    """``agentlog_resource_used`` and ``agentlog_resource_limit`` by resource (descriptors, threads,
    memory in bytes, address space in bytes); a resource with no limit has no limit sample."""

    def __init__(self, watch: ResourceWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[GaugeMetricFamily]:
        usages = self.watch.usages  # replaced whole by the watch's thread
        used = GaugeMetricFamily(
            "agentlog_resource_used",
            "What the worker uses of a resource, at the last sample",
            labels=["resource"],
        )
        limit = GaugeMetricFamily(
            "agentlog_resource_limit",
            "The limit the worker's use of a resource is watched against (readiness fails at "
            "resource_high_water of it)",
            labels=["resource"],
        )
        for usage in usages:
            used.add_metric([usage.resource], usage.used)
            if usage.limit is not None:
                limit.add_metric([usage.resource], usage.limit)
        yield used
        yield limit
