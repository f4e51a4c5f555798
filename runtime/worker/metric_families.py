"""The worker's counters (runtime.worker.metrics) as Prometheus metric families, built at each
scrape: imported only by the operations port (runtime.worker.ops), with prometheus-client."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from runtime.worker.metrics import CALL_BUCKETS, WorkerMetrics, cumulative

if TYPE_CHECKING:
    from runtime.log.schemas.serde import Serde
    from runtime.ops.sampler import Sampler
    from runtime.worker.partition import OwnedPartition


def commands_lag(
    high_watermark: Callable[[int], int], owned: Callable[[], list[OwnedPartition]]
) -> Callable[[], dict[int, int]]:
    """Partition -> commands not handled yet, for each owned partition (a Sampler's sample)."""

    def sample() -> dict[int, int]:
        # next_command: the first command this worker has not handled yet
        return {o.partition: max(0, high_watermark(o.partition) - o.next_command) for o in owned()}

    return sample


class WorkerCollector(Collector):
    """The ``agentlog_*`` metric families of one worker, built at each scrape."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        owned: Callable[[], list[OwnedPartition]],
        serde: Serde,
        lag: Sampler | None = None,
    ) -> None:
        self.metrics = metrics
        self.owned = owned
        self.serde = serde
        self.lag = lag

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        m = self.metrics
        yield from self._runs()
        yield _counter("agentlog_runs_started", "Runs this worker started", ["workflow"], m.runs_started)
        yield _counter(
            "agentlog_runs_ended",
            "Runs that ended on this worker, by status (parked: waits for an operator)",
            ["workflow", "status"],
            m.runs_ended,
        )
        yield _counter(
            "agentlog_runs_parked",
            "Runs parked on this worker (non-determinism, history limit, a workflow it lacks)",
            ["workflow"],
            {(w,): n for (w, status), n in dict(m.runs_ended).items() if status == "parked"},
        )
        calls = list(m.calls.items())
        yield _counter(
            "agentlog_steps",
            "Outcomes recorded that resumed workflow code: a call's result or final failure, a timer, a signal",
            ["workflow"],
            m.steps(),
        )
        attempts: dict[tuple[str, str, str, str], int] = {}
        retries: dict[tuple[str, str], int] = {}
        latency: dict[tuple[str, str], tuple[list[int], float]] = {}
        for (workflow, kind, name), counts in calls:
            attempts[(workflow, kind, name, "completed")] = counts.completed
            if counts.failed:
                attempts[(workflow, kind, name, "failed")] = counts.failed
            retries[(kind, name)] = retries.get((kind, name), 0) + counts.failed - counts.final_failures
            buckets, total = latency.get((kind, name), ([0] * (len(CALL_BUCKETS) + 1), 0.0))
            latency[(kind, name)] = (
                [a + b for a, b in zip(buckets, list(counts.latency.counts), strict=True)],
                total + counts.latency.total,
            )
        yield _counter(
            "agentlog_calls",
            "Model and tool call attempts, by outcome (completed or failed)",
            ["workflow", "kind", "name", "outcome"],
            attempts,
        )
        yield _counter(
            "agentlog_call_retries", "Failed call attempts that are tried again", ["kind", "name"], retries
        )
        yield _counter(
            "agentlog_calls_in_doubt",
            "Calls found in flight at a takeover (scheduled, no outcome) and executed again with their recorded key",
            ["kind", "name"],
            m.in_doubt,
        )
        yield _counter(
            "agentlog_history_size_warnings",
            "Runs that passed the history-size warn threshold (history_warn_events or history_warn_bytes)",
            ["workflow"],
            m.history_warnings,
        )
        durations = HistogramMetricFamily(
            "agentlog_call_duration_seconds",
            "Duration of one model or tool call attempt",
            labels=["kind", "name"],
        )
        for (kind, name), (buckets, total) in sorted(latency.items()):
            durations.add_metric([kind, name], cumulative(CALL_BUCKETS, buckets), total)
        yield durations
        yield from _permits(m)
        rebuilds = HistogramMetricFamily(
            "agentlog_takeover_duration_seconds",
            "Time to claim and rebuild the partitions of one assignment, until their runs resume",
        )
        rebuilds.add_metric([], m.rebuilds.buckets(), m.rebuilds.total)
        yield rebuilds
        taken = CounterMetricFamily(
            "agentlog_partitions_taken", "Partitions claimed and rebuilt by this worker"
        )
        taken.add_metric([], m.partitions_taken)
        yield taken
        fallbacks = CounterMetricFamily(
            "agentlog_schema_cache_fallbacks",
            "Schema answers served from the state folder's schema cache while the registry was unreachable",
        )
        fallbacks.add_metric([], self.serde.resolver.cache.fallbacks)
        yield fallbacks
        if self.lag is not None:
            lag = GaugeMetricFamily(
                "agentlog_commands_lag",
                "Commands in the commands topic this worker has not handled yet, per owned partition",
                labels=["partition"],
            )
            for partition, behind in sorted(self.lag.value.items()):
                lag.add_metric([str(partition)], behind)
            yield lag

    def _runs(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        owned = self.owned()
        partitions = GaugeMetricFamily("agentlog_partitions_owned", "Commands partitions this worker owns")
        partitions.add_metric([], len(owned))
        yield partitions
        counts: dict[tuple[str, str], int] = {}
        in_memory = evicted = 0
        for partition in owned:
            for run in list(partition.runs.values()):
                state = "waiting" if run.waiting() else "active"
                key = (run.view.workflow, state)
                counts[key] = counts.get(key, 0) + 1
            # Evicted runs wait by construction; one a takeover indexed unread has no workflow name yet.
            for entry in list(partition.evicted.values()):
                key = (entry.workflow or "(not read yet)", "waiting")
                counts[key] = counts.get(key, 0) + 1
            in_memory += len(partition.runs)
            evicted += len(partition.evicted)
        cache = GaugeMetricFamily(
            "agentlog_runs_cached",
            "Live runs on this worker by where they are: in memory, or evicted by the run cache (replayed "
            "from their records when a signal, timer or command reaches them; Settings.run_cache_size)",
            labels=["where"],
        )
        cache.add_metric(["memory"], in_memory)
        cache.add_metric(["evicted"], evicted)
        yield cache
        held = GaugeMetricFamily(
            "agentlog_commands_held",
            "Commands held until the run cache has room for their run: submissions and wakes of evicted "
            "runs while run_cache_size runs are busy (runtime.worker.admission)",
        )
        held.add_metric([], sum(len(partition.admission.queue) for partition in owned))
        yield held
        peak = GaugeMetricFamily(
            "agentlog_runs_cached_peak",
            "The most runs in memory at once since the worker started, after each eviction round: at most "
            "run_cache_size plus the runs that bypass admission (cancels, signals to runs in memory)",
        )
        peak.add_metric([], self.metrics.run_cache_peak)
        yield peak
        yield _plain_counter(
            "agentlog_commands_admitted",
            "Commands held until the run cache had room for their run, then admitted",
            self.metrics.commands_admitted,
        )
        yield _plain_counter(
            "agentlog_run_cache_evictions",
            "Waiting runs evicted from memory by the run cache",
            self.metrics.run_evictions,
        )
        foreign = CounterMetricFamily(
            "agentlog_foreign_records",
            "Records in an owned events partition that this worker did not write (runtime.worker.foreign), "
            "by what was done: parked (its run), named (an ended run's), named_unknown_run",
            labels=["action"],
        )
        for action, count in dict(self.metrics.foreign_records).items():
            foreign.add_metric([action], count)
        yield foreign
        forged = CounterMetricFamily(
            "agentlog_forged_partition_records",
            "Claims, checkpoints and snapshots no worker signed (runtime.worker.partition_forgery): "
            "not obeyed, by record type",
            labels=["type"],
        )
        for kind, count in dict(self.metrics.forged_partition_records).items():
            forged.add_metric([kind], count)
        yield forged
        yield _plain_counter(
            "agentlog_run_cache_wakes",
            "Evicted runs woken (replayed from their records) because something reached them",
            self.metrics.run_wakes,
        )
        runs = GaugeMetricFamily(
            "agentlog_runs",
            "Live runs on this worker: waiting (only on timers or signals) or active (a call in flight or due)",
            labels=["workflow", "state"],
        )
        for (workflow, state), n in sorted(counts.items()):
            runs.add_metric([workflow, state], n)
        yield runs


def _permits(m: WorkerMetrics) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
    """Calls waiting for a limit's permit now, and how long the waits that ended lasted."""
    waiting = GaugeMetricFamily(
        "agentlog_calls_waiting_for_permit",
        "Calls on this worker waiting for a permit of a declared limit, by limit and dimension",
        labels=["limit", "dimension"],
    )
    for (limit, dimension), n in sorted(dict(m.permits_waiting).items()):
        waiting.add_metric([limit, dimension], n)
    yield waiting
    waits = HistogramMetricFamily(
        "agentlog_permit_wait_seconds",
        "How long a call waited for a permit of a declared limit (calls granted at once are not counted)",
        labels=["limit", "dimension"],
    )
    for (limit, dimension), histogram in sorted(dict(m.permit_waits).items()):
        waits.add_metric([limit, dimension], histogram.buckets(), histogram.total)
    yield waits


def _counter(
    name: str, documentation: str, labels: list[str], values: Mapping[Any, int]
) -> CounterMetricFamily:
    """A counter family from ``values``: label values (a tuple, or one string) -> count."""
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, value in list(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [str(key)], value)
    return family


def _plain_counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family
