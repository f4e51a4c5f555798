"""Where one step's and one submit/result's time goes, from stage marks (runtime.stagemarks):
the pure part of bench/stages.py -- walking each run's marks along a chain of stages and
summarising the gaps.

A timeline is one run's marks, ``(ns, stage)`` sorted by time. A chain is the stages a step (or a
submission) passes in order; walking it takes, for each stage, the first mark of that stage at or
after the previous one's time, so marks of other stages in between (a checkpoint's ack, a
concurrent record) are skipped, and a chain that cannot be completed yields nothing.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence

Timeline = list[tuple[int, str]]

# One step: a scripted model call, then a sync tool committing one SQLite row, up to the next
# step's model call. "tool commit" is the tool's own wall time, read from its SQLite row. A model
# call and a tool without effect start as soon as their Scheduled record is sent, and wait for
# its ack after the call (runtime.worker.execution): "call end -> scheduled acked" is what is left
# of the produce -> ack round trip once the call has overlapped it (ACK shows the whole trip).
# An effect's step waits before its call instead: it does not fit this chain and is left out.
STEP = (
    "call start model",
    "call end model",
    "scheduled acked",
    "append ModelCallCompleted",
    "sent",
    "call start tool",
    "tool commit",
    "call end tool",
    "scheduled acked",
    "append ToolCallCompleted",
    "sent",
    "call start model",
)
# One step of the sync workload (bench/e2e_app.py's e2e-sync): the model is a sync call in the pool
# too, committing its own row ("model commit", from its SQLite row), so a step holds two pool hops.
SYNC_STEP = (
    "call start model",
    "model commit",
    *STEP[1:],
)
# Each batch of records: sent -> acknowledged by the broker (its delivery callback), the round
# trip that a non-effect call now overlaps.
ACK = ("sent", "broker ack")
# Submit -> first model call. "client ..." marks are the benchmark's own (its process).
SUBMIT = (
    "client submit called",
    "client submit returned",
    "intake polled",
    "append RunStarted",
    "append ModelCallScheduled",
    "sent",
    "call start model",
)
# Last tool call -> Client.result returns. The worker's "broker ack" is left out: the client's tail
# may read the record before the worker's delivery callback runs.
RESULT = (
    "call end tool",
    "append RunCompleted",
    "sent",
    "client tail delivered",
    "client result returned",
)


def walk(timeline: Timeline, chain: Sequence[str], start: int = 0) -> tuple[list[int], int] | None:
    """The times of ``chain``'s stages in ``timeline`` from index ``start`` on, and the index of
    the chain's first mark (to start the next walk after); None if some stage never comes."""
    times: list[int] = []
    first = -1
    index = start
    for stage in chain:
        while index < len(timeline) and timeline[index][1] != stage:
            index += 1
        if index == len(timeline):
            return None
        if first < 0:
            first = index
        times.append(timeline[index][0])
        index += 1
    return times, first


def steps(timeline: Timeline, chain: Sequence[str] = STEP) -> list[list[int]]:
    """Every complete ``chain`` in ``timeline``, each as its stages' times (steps follow each other:
    a step's last stage is the next one's first). A walk that passes another mark of the chain's
    first stage before its last stage spans more than one step (a step whose marks come in
    another order, such as an effect's): it is left out."""
    found: list[list[int]] = []
    start = 0
    while (walked := walk(timeline, chain, start)) is not None:
        times, first = walked
        inner = [ns for ns, stage in timeline[first + 1 :] if ns < times[-1] and stage == chain[0]]
        if not inner:
            found.append(times)
        start = first + 1
    return found


def gaps(chains: Iterable[list[int]]) -> list[list[int]]:
    """Per stage transition, the gaps (ns) of every chain: ``result[i]`` is stage i -> i+1."""
    columns: list[list[int]] = []
    for times in chains:
        for i in range(len(times) - 1):
            if len(columns) <= i:
                columns.append([])
            columns[i].append(times[i + 1] - times[i])
    return columns


def p90(values: Sequence[int]) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))])


def table(title: str, chain: Sequence[str], chains: list[list[int]]) -> list[str]:
    """Text rows: each transition's median and p90 in microseconds and its share of the sum of
    medians, then the median of the whole chain."""
    columns = gaps(chains)
    if not columns:
        return [f"{title}: no complete chain found"]
    medians = [statistics.median(c) for c in columns]
    total = sum(medians) or 1
    width = max(len(f"{a} -> {b}") for a, b in itertools.pairwise(chain))
    rows = [f"{title} ({len(chains)} samples)", f"  {'stage':<{width}}  {'median us':>10}  {'p90 us':>9}  {'share':>6}"]
    for (a, b), column, median in zip(itertools.pairwise(chain), columns, medians, strict=True):
        rows.append(f"  {a + ' -> ' + b:<{width}}  {median / 1000:>10.1f}  {p90(column) / 1000:>9.1f}  {median / total:>6.1%}")
    whole = [times[-1] - times[0] for times in chains]
    rows.append(f"  {'sum of medians':<{width}}  {total / 1000:>10.1f}")
    rows.append(f"  {'whole chain (median, p90)':<{width}}  {statistics.median(whole) / 1000:>10.1f}  {p90(whole) / 1000:>9.1f}")
    return rows
