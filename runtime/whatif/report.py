"""A what-if's report: for each run whether its decisions changed, and what it cost, against the original.

A run's decisions are its tool calls (name and arguments) from the fork position on, then its ending:
the first differing call, both sides, is what changed; with the same calls, a different ending or
final answer is. Tokens, cost and latency count only the part the fork ran again (the prefix before
the fork position is copied, not run). Effects the fork did not make are listed as "would have
called", with their arguments. In aggregate: per tool, how many runs no longer make it and how many
newly do, and the cost delta.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunParked,
    RunRejected,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.log.records.status import SKIPPED_IN_FORK
from runtime.pricing import PriceTable
from runtime.whatif.forks import PlannedRun

# A fork's ending; RunRejected: the worker refused it (a code version it does not hold).
_ENDINGS = (RunCompleted, RunFailed, RunCancelled, RunParked, RunRejected)
_ENDED_AS = {
    RunCompleted: "completed",
    RunFailed: "failed",
    RunCancelled: "cancelled",
    RunRejected: "rejected",
}


@dataclass(frozen=True)
class Call:
    """A tool call a run made (or, in a what-if, would have made)."""

    position: int
    tool: str
    args: Any

    def describe(self) -> str:
        return f"{self.tool}({json.dumps(self.args, sort_keys=True)}) at {self.position}"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the original's or the what-if's part from the fork position on."""

    status: str
    result: Any
    calls: tuple[Call, ...]
    tokens: int
    cost_usd: float | None
    latency_ms: int
    would_have_called: tuple[Call, ...] = ()


@dataclass(frozen=True)
class RunRow:
    """One selected run in the report."""

    origin: str
    fork: str | None  # None: the change touches none of its calls, so it was not replayed
    position: int | None
    state: str  # unchanged | changed | untouched | pending (the fork has not ended)
    original: Side | None = None
    whatif: Side | None = None
    first_difference: dict[str, Any] | None = None  # {"position", "original", "whatif"}

    @property
    def changed(self) -> bool:
        return self.state == "changed"


@dataclass(frozen=True)
class ToolChange:
    tool: str
    original_runs: int  # runs whose original made the call
    whatif_runs: int  # runs whose what-if made (or would have made) it
    no_longer: int  # runs that made it and no longer do
    more: int  # runs that did not make it and now do

    def describe(self) -> str:
        parts = []
        if self.no_longer:
            parts.append(f"{self.no_longer} of {self.original_runs} no longer made")
        if self.more:
            parts.append(f"{self.more} more")
        return f"{self.tool}: {'; '.join(parts)}"


@dataclass(frozen=True)
class Report:
    whatif_id: str
    change: str
    rows: tuple[RunRow, ...]
    tools: tuple[ToolChange, ...] = field(default=())
    original_cost_usd: float | None = None
    whatif_cost_usd: float | None = None
    original_tokens: int = 0
    whatif_tokens: int = 0

    @property
    def changed(self) -> list[RunRow]:
        return [r for r in self.rows if r.changed]

    @property
    def pending(self) -> list[RunRow]:
        return [r for r in self.rows if r.state == "pending"]

    @property
    def cost_delta_usd(self) -> float | None:
        if self.original_cost_usd is None or self.whatif_cost_usd is None:
            return None
        return self.whatif_cost_usd - self.original_cost_usd

    def summary(self) -> str:
        done = len(self.rows) - len(self.pending)
        head = f"{len(self.changed)} of {done} runs changed"
        if self.pending:
            head += f" ({len(self.pending)} of {len(self.rows)} not yet replayed: --resume {self.whatif_id})"
        tools = "; ".join(t.describe() for t in self.tools)
        cost = "" if self.cost_delta_usd is None else f"; cost {self.cost_delta_usd:+.6f} USD"
        return head + (f"; {tools}" if tools else "") + cost

    def as_dict(self) -> dict[str, Any]:
        return {
            "whatif": self.whatif_id,
            "change": self.change,
            "summary": self.summary(),
            "runs": len(self.rows),
            "changed": len(self.changed),
            "pending": len(self.pending),
            "tools": [asdict(t) for t in self.tools],
            "tokens": {"original": self.original_tokens, "whatif": self.whatif_tokens},
            "cost_usd": {
                "original": self.original_cost_usd,
                "whatif": self.whatif_cost_usd,
                "delta": self.cost_delta_usd,
            },
            "rows": [asdict(r) for r in self.rows],
        }


def _side(events: Sequence[Event], position: int, prices: PriceTable | None, *, fork: bool) -> Side:
    """What a run did from ``position`` on."""
    scheduled: dict[int, ToolCallScheduled] = {}
    models: dict[int, ModelCallScheduled] = {}
    calls: list[Call] = []
    skipped: list[Call] = []
    tokens, cost, priced = 0, 0.0, True
    first_ms: int | None = None
    status, result, end_ms = "running", None, 0
    for event in events:
        at = getattr(event, "position", None)
        live = isinstance(at, int) and at >= position
        if live and first_ms is None:
            first_ms = event.occurred_at
        if isinstance(event, ToolCallScheduled) and live:
            scheduled[event.position] = event
            calls.append(Call(event.position, event.tool, json.loads(event.args)))
        elif isinstance(event, ToolCallCompleted) and event.position in scheduled and fork:
            if json.loads(event.result) == SKIPPED_IN_FORK:
                call = scheduled[event.position]
                skipped.append(Call(call.position, call.tool, json.loads(call.args)))
        elif isinstance(event, ModelCallScheduled) and live:
            models[event.position] = event
        elif isinstance(event, ModelCallCompleted) and event.position in models:
            used = (event.input_tokens or 0) + (event.output_tokens or 0)
            tokens += used
            if prices is not None:
                asked = models[event.position]
                param = json.loads(asked.params).get("model") if asked.params else None
                names = (event.response_model, param if isinstance(param, str) else None, asked.model)
                one = prices.cost(
                    names,
                    asked.occurred_at,
                    event.input_tokens or 0,
                    event.output_tokens or 0,
                    event.cached_tokens or 0,
                )
                if one is None:
                    priced = priced and used == 0
                else:
                    cost += one
        elif isinstance(event, _ENDINGS):
            status = _ENDED_AS.get(type(event), "parked")
            result = _ending_result(event)
            end_ms = event.occurred_at
    latency = max(0, end_ms - first_ms) if first_ms is not None and end_ms else 0
    return Side(
        status,
        result,
        tuple(calls),
        tokens,
        cost if prices is not None and priced else None,
        latency,
        tuple(skipped),
    )


def _ending_result(event: Event) -> Any:
    if isinstance(event, RunCompleted):
        return json.loads(event.result)
    if isinstance(event, RunFailed):
        return f"{event.error_type}: {event.error}"
    return getattr(event, "reason", "")


def _first_difference(original: Side, whatif: Side) -> dict[str, Any] | None:
    for index in range(max(len(original.calls), len(whatif.calls))):
        left = original.calls[index] if index < len(original.calls) else None
        right = whatif.calls[index] if index < len(whatif.calls) else None
        if left is None or right is None or (left.tool, left.args) != (right.tool, right.args):
            at = left.position if left is not None else right.position if right is not None else None
            return {
                "position": at,
                "original": left.describe() if left is not None else "no further tool call",
                "whatif": right.describe() if right is not None else "no further tool call",
            }
    if (original.status, original.result) != (whatif.status, whatif.result):
        return {
            "position": None,
            "original": f"{original.status}: {json.dumps(original.result, sort_keys=True)}",
            "whatif": f"{whatif.status}: {json.dumps(whatif.result, sort_keys=True)}",
        }
    return None


def compare(
    planned: PlannedRun,
    fork: str | None,
    original: Sequence[Event],
    whatif: Sequence[Event] | None,
    prices: PriceTable | None,
) -> RunRow:
    """One run's row: its fork (None: not forked) against its original."""
    if planned.position is None or fork is None:
        return RunRow(planned.origin, None, None, "untouched")
    before = _side(original, planned.position, prices, fork=False)
    if whatif is None:
        return RunRow(planned.origin, fork, planned.position, "pending", before)
    after = _side(whatif, planned.position, prices, fork=True)
    if after.status == "running":
        return RunRow(planned.origin, fork, planned.position, "pending", before, after)
    difference = _first_difference(before, after)
    state = "unchanged" if difference is None else "changed"
    return RunRow(planned.origin, fork, planned.position, state, before, after, difference)


def _tool_changes(rows: Sequence[RunRow]) -> tuple[ToolChange, ...]:
    done = [r for r in rows if r.original is not None and r.whatif is not None and r.state != "pending"]
    tools = sorted({c.tool for r in done for side in (r.original, r.whatif) if side for c in side.calls})
    changes = []
    for tool in tools:
        made = [
            (any(c.tool == tool for c in r.original.calls), any(c.tool == tool for c in r.whatif.calls))
            for r in done
            if r.original is not None and r.whatif is not None
        ]
        change = ToolChange(
            tool,
            sum(1 for before, _ in made if before),
            sum(1 for _, after in made if after),
            sum(1 for before, after in made if before and not after),
            sum(1 for before, after in made if after and not before),
        )
        if change.no_longer or change.more:
            changes.append(change)
    return tuple(changes)


def build_report(
    whatif_id: str,
    change: str,
    rows: Sequence[RunRow],
) -> Report:
    """The report of ``rows``, with its aggregates."""
    done = [r for r in rows if r.state in ("changed", "unchanged")]
    costs = [(r.original.cost_usd, r.whatif.cost_usd) for r in done if r.original and r.whatif]
    priced = all(a is not None and b is not None for a, b in costs)
    return Report(
        whatif_id,
        change,
        tuple(rows),
        _tool_changes(rows),
        sum(a or 0.0 for a, _ in costs) if priced else None,
        sum(b or 0.0 for _, b in costs) if priced else None,
        sum(r.original.tokens for r in done if r.original),
        sum(r.whatif.tokens for r in done if r.whatif),
    )


def rows_for(
    planned: Sequence[PlannedRun],
    whatif_id: str,
    originals: Mapping[str, Sequence[Event]],
    forks: Mapping[str, Sequence[Event]],
    prices: PriceTable | None,
) -> list[RunRow]:
    """Each planned run's row, from the originals' and the forks' histories (a fork missing from
    ``forks`` has not started)."""
    rows = []
    for item in planned:
        fork = item.fork_of(whatif_id)
        rows.append(compare(item, fork, originals[item.origin], forks.get(fork) if fork else None, prices))
    return rows
