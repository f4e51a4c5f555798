"""The worker's Prometheus metrics: counted as it goes, exposed when scraped.

Cost on the step path: prometheus-client's own Counter and Histogram take a lock and look up
their labelled child on every ``inc``/``observe`` (about 1-2 us each, several per step). Here the
worker only bumps plain ints in dicts keyed by its low-cardinality labels (workflow, call kind,
model or tool name -- never a run id), a few tens of nanoseconds each, on the event loop's thread.
A scrape (another thread) copies those dicts -- each copy is one C call under the GIL, so it never
sees a dict mid-update -- and turns them into metric families (runtime.worker.metric_families,
which alone imports prometheus-client: a worker without a metrics port never loads it, ~14 ms of
a restarted worker's start). What only a scrape needs (the runs now active or waiting, the
commands lag) is computed then, from the worker's state, and not kept up to date on the way.
"""

from __future__ import annotations

import bisect

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
# Seconds a call waited for a limit's permit: from a scheduling tick to a minute's window or more.
PERMIT_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
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
        return cumulative(self.bounds, list(self.counts))  # one copy: the loop may observe meanwhile


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
        # The run cache (runtime.worker.run_cache): runs evicted from memory, and evicted runs woken.
        self.run_evictions = 0
        self.run_wakes = 0
        self.commands_admitted = 0  # commands held for room in the run cache, then admitted
        self.run_cache_peak = 0  # the most runs in memory after an eviction round (admission's bound)
        # Records in an owned partition this worker did not write (runtime.worker.foreign), by what
        # was done: "parked" (its run), "named" (an ended run's), "named_unknown_run".
        self.foreign_records: dict[str, int] = {}
        # Partition records no worker signed (runtime.worker.partition_forgery), by record type.
        self.forged_partition_records: dict[str, int] = {}
        # Limits (runtime.worker.limits.gate), by limit name and dimension: only calls that waited.
        self.permits_waiting: dict[tuple[str, str], int] = {}  # calls waiting now
        self.permit_waits: dict[tuple[str, str], Histogram] = {}  # how long each wait lasted

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

    def permit_wait(self, limit: str, dimension: str, seconds: float | None) -> None:
        """A call began waiting for a permit (``seconds`` None), or its wait of ``seconds`` ended."""
        key = (limit, dimension)
        if seconds is None:
            self.permits_waiting[key] = self.permits_waiting.get(key, 0) + 1
            return
        self.permits_waiting[key] = self.permits_waiting.get(key, 1) - 1
        waits = self.permit_waits.get(key)
        if waits is None:
            waits = self.permit_waits[key] = Histogram(PERMIT_WAIT_BUCKETS)
        waits.observe(seconds)

    def takeover(self, seconds: float, partitions: int) -> None:
        """One assignment's claims and rebuilds took ``seconds``."""
        self.rebuilds.observe(seconds)
        self.partitions_taken += partitions


def cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (the last above every bound) as cumulative ``(le, count)`` pairs."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        running += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return out
