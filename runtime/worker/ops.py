"""The worker's operations port: its metrics (runtime.worker.metrics) and probes
(runtime.worker.health) served by runtime.ops.server, when ``metrics_port`` is set."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.schemas.serde import Serde
from runtime.ops.sampler import Sampler
from runtime.ops.server import OpsServer
from runtime.worker.health import Readiness
from runtime.worker.metric_families import WorkerCollector, commands_lag
from runtime.worker.metrics import WorkerMetrics
from runtime.worker.partition import OwnedPartition
from runtime.worker.resource_metrics import ResourceCollector
from runtime.worker.resources import ResourceWatch


class WorkerOps:
    """Starts and stops the port and the commands-lag sampler behind it."""

    def __init__(
        self,
        settings: Settings,
        log: EventLog,
        serde: Serde,
        metrics: WorkerMetrics,
        owned: Callable[[], list[OwnedPartition]],
        readiness: Readiness,
        port: int,
        resources: ResourceWatch | None = None,
    ) -> None:
        topic = settings.commands_topic
        self.lag = Sampler(
            "commands_lag", commands_lag(lambda partition: log.watermarks(topic, partition)[1], owned)
        )
        self.registry = CollectorRegistry()
        # process_cpu_seconds_total beside agentlog_steps_total: CPU per step, on a dashboard.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(WorkerCollector(metrics, owned, serde, self.lag))
        exhausted = None
        if resources is not None:
            self.registry.register(ResourceCollector(resources))

            def exhausted(error: OSError) -> None:  # the worker cannot go on: it stops
                resources.fatal("accepting a connection to the operations port", error)

        self.server = OpsServer(self.registry, readiness, port, settings.metrics_host, exhausted)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> WorkerOps:
        self.lag.start()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.lag.stop()
