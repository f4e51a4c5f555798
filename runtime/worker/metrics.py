"""The worker's Prometheus metrics: counted as it goes, exposed when scraped.

Cost on the step path: prometheus-client's own Counter and Histogram take a lock and look up
their labelled child on every ``inc``/``observe`` (about 1-2 us each, several per step). Here the
worker only bumps plain ints in dicts keyed by its low-cardinality labels (workflow, call kind,
model or tool name -- never a run id), a few tens of nanoseconds each, on the event loop's thread.
A scrape (another thread) copies those dicts -- each copy is one C call under the GIL, so it never
sees a dict mid-update -- and turns them into metric families (``WorkerCollector``). What only a
scrape needs (the runs now active or waiting, the commands lag) is computed then, from the
worker's state, and not kept up to date on the way.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from runtime.workflow.futures import GatherFuture

if TYPE_CHECKING:
    from runtime.log.schemas.serde import Serde
    from runtime.ops.sampler import Sampler
    from runtime.worker.partition import OwnedPartition
    from runtime.workflow.machine import RunMachine

# Seconds; model calls take 0.2-30 s, tools from microseconds (an in-process lookup) to seconds.
CALL_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
REBUILD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Histogram:
    """Bucket counts (not cumulative), a sum and a count: ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, as Prometheus wants them."""
        return _cumulative(self.bounds, list(self.counts))  # one copy: the loop may observe meanwhile


class CallCounts:
    """One (workflow, kind, name)'s call attempts: the counters and the latency histogram of the
    step path, reached with one dict lookup per call."""

    __slots__ = ("completed", "failed", "final_failures", "latency")

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.final_failures = 0  # failures not retried: they resume the workflow (raise in it)
        self.latency = Histogram(CALL_BUCKETS)


class WorkerMetrics:
    """What the worker counts while it runs (see the module docstring). Loop thread only."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str, str], CallCounts] = {}  # (workflow, kind, name) -> its counts
        self.other_steps: dict[str, int] = {}  # workflow -> timers fired and signals received
        self.in_doubt: dict[tuple[str, str], int] = {}
        self.runs_started: dict[str, int] = {}
        self.runs_ended: dict[tuple[str, str], int] = {}  # (workflow, status) -> runs
        self.history_warnings: dict[str, int] = {}
        self.rebuilds = Histogram(REBUILD_BUCKETS)
        self.partitions_taken = 0

    def call(self, workflow: str, kind: str, name: str, completed: bool, seconds: float, final: bool) -> None:
        """One attempt of a model or tool call ended, ``completed`` or failed; ``final`` when its
        outcome resumes the workflow (a success, or a failure not retried)."""
        counts = self.calls.get((workflow, kind, name))
        if counts is None:
            counts = self.calls[(workflow, kind, name)] = CallCounts()
        if completed:
            counts.completed += 1
        else:
            counts.failed += 1
            counts.final_failures += final
        latency = counts.latency
        latency.counts[bisect.bisect_left(CALL_BUCKETS, seconds)] += 1
        latency.total += seconds

    def steps(self) -> dict[str, int]:
        """Workflow -> outcomes that resumed its code: calls' results and final failures, timers, signals."""
        steps = dict(self.other_steps)
        for (workflow, _, _), counts in list(self.calls.items()):
            steps[workflow] = steps.get(workflow, 0) + counts.completed + counts.final_failures
        return steps

    def step(self, workflow: str) -> None:
        """An outcome that is not a call's (a timer fired, a signal arrived) resumed the workflow."""
        self.other_steps[workflow] = self.other_steps.get(workflow, 0) + 1

    def run_started(self, workflow: str) -> None:
        self.runs_started[workflow] = self.runs_started.get(workflow, 0) + 1

    def run_ended(self, workflow: str, status: str) -> None:
        key = (workflow, status)
        self.runs_ended[key] = self.runs_ended.get(key, 0) + 1

    def call_in_doubt(self, kind: str, name: str) -> None:
        self.in_doubt[(kind, name)] = self.in_doubt.get((kind, name), 0) + 1

    def history_warning(self, workflow: str) -> None:
        self.history_warnings[workflow] = self.history_warnings.get(workflow, 0) + 1

    def takeover(self, seconds: float, partitions: int) -> None:
        """One assignment's claims and rebuilds took ``seconds``."""
        self.rebuilds.observe(seconds)
        self.partitions_taken += partitions


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
            durations.add_metric([kind, name], _cumulative(CALL_BUCKETS, buckets), total)
        yield durations
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

    def _runs(self) -> Iterator[GaugeMetricFamily]:
        owned = self.owned()
        partitions = GaugeMetricFamily("agentlog_partitions_owned", "Commands partitions this worker owns")
        partitions.add_metric([], len(owned))
        yield partitions
        counts: dict[tuple[str, str], int] = {}
        for partition in owned:
            for machine in list(partition.runs.values()):
                state = "waiting" if _waiting(machine) else "active"
                key = (machine.workflow, state)
                counts[key] = counts.get(key, 0) + 1
        runs = GaugeMetricFamily(
            "agentlog_runs",
            "Live runs on this worker: waiting (only on timers or signals) or active (a call in flight or due)",
            labels=["workflow", "state"],
        )
        for (workflow, state), n in sorted(counts.items()):
            runs.add_metric([workflow, state], n)
        yield runs


def _waiting(machine: RunMachine) -> bool:
    """True if all the run waits for is timers or signals: one lookup per future it waits on, not a
    walk of the run's commands (a scrape must stay cheap under thousands of long runs)."""
    blocked = machine.blocked_on
    if blocked is None:
        return False
    futures = blocked.children if isinstance(blocked, GatherFuture) else [blocked]
    commands = machine.commands
    kinds = [commands[f.position].kind for f in futures if not f.done and f.position in commands]
    return bool(kinds) and all(kind in ("timer", "signal") for kind in kinds)


def _counter(
    name: str, documentation: str, labels: list[str], values: Mapping[Any, int]
) -> CounterMetricFamily:
    """A counter family from ``values``: label values (a tuple, or one string) -> count."""
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, value in list(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [str(key)], value)
    return family


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (the last above every bound) as cumulative ``(le, count)`` pairs."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        running += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return out
