"""The questions a browser asks of the store (``agentlog ui``): runs with filters and sorting, one
run's summary and per-call usage, the partition's worker claims, and a cheap "has it changed?".

Columns that later migrations add (tokens and cost on ``model_calls``, issue 13) are looked up in
``system.columns`` first, so every question here works on a store that lacks them, and shows them
as soon as a migration adds them -- without this module naming a migration.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.config import Settings
from runtime.log.records.status import RUN_STATES

from .audit import AuditError, Rows
from .prompt_inputs import resolve_rows
from .results import JsonValue
from .store import QueryStore
from .tables import CLAIM_TYPE, DATABASE, EVENTS

# Usage columns of the model_calls view, shown when the store has them (issue 13 adds them).
# ``copied``: a call a reset or fork copied from its original, which paid for it (left out of sums).
USAGE_COLUMNS = ("response_model", "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "copied")
PROMPT_COLUMNS = ("messages", "params")
RUN_SORTS = ("run_id", "workflow", "status", "steps", "events", "bytes", "cost", "started_at", "ended_at")


def view_columns(store: QueryStore, name: str) -> frozenset[str]:
    """The columns of table or view ``agentlog.<name>`` as the store has it now."""
    result = store.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String}",
        {"db": DATABASE, "t": name},
    )
    return frozenset(str(row[0]) for row in result.rows)


def _ch_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class RunFilter:
    """What the runs page asks for; every field optional."""

    status: str | None = None
    workflow: str | None = None
    since: dt.datetime | None = None  # started at or after
    until: dt.datetime | None = None  # started before
    near_limit: bool = False  # at or over the history warn threshold
    sort: str = "started_at"
    descending: bool = True
    limit: int = 200


def run_list(store: QueryStore, settings: Settings, wanted: RunFilter) -> Rows:
    """Runs with their steps (model calls: one decision each), size and cost where the store has it."""
    if wanted.status and wanted.status not in RUN_STATES:
        raise AuditError(f"status {wanted.status!r}: expected one of {', '.join(RUN_STATES)}")
    if wanted.sort not in RUN_SORTS:
        raise AuditError(f"sort {wanted.sort!r}: expected one of {', '.join(RUN_SORTS)}")
    has_cost = "cost_usd" in view_columns(store, "model_calls")
    # NULL, not 0, for a run none of whose calls is priced: "no cost known" is not "free".
    cost = "m.cost" if has_cost else "CAST(NULL AS Nullable(Float64))"
    conditions = ["r.whatif IS NULL"]  # what-if runs are not production runs (agentlog whatif)
    parameters: dict[str, Any] = {
        "limit": wanted.limit,
        "we": settings.history_warn_events,
        "wb": settings.history_warn_bytes,
    }
    if wanted.status:
        conditions.append("r.status = {status:String}")
        parameters["status"] = wanted.status
    if wanted.workflow:
        conditions.append("r.workflow = {workflow:String}")
        parameters["workflow"] = wanted.workflow
    if wanted.since is not None:
        conditions.append("r.started_at >= {since:DateTime64(3, 'UTC')}")
        parameters["since"] = _ch_time(wanted.since)
    if wanted.until is not None:
        conditions.append("r.started_at < {until:DateTime64(3, 'UTC')}")
        parameters["until"] = _ch_time(wanted.until)
    if wanted.near_limit:
        conditions.append("(r.events >= {we:UInt64} OR r.bytes >= {wb:UInt64})")
    direction = "DESC" if wanted.descending else "ASC"
    if wanted.sort not in ("steps", "cost"):
        return _runs_then_calls(store, conditions, parameters, f"{wanted.sort} {direction}", has_cost)
    # Sorting by steps or cost needs every run's calls: join them whole.
    cost_join = (
        f"LEFT JOIN (SELECT run_id, sum(cost_usd) AS cost FROM {DATABASE}.model_calls "
        "GROUP BY run_id) AS m ON m.run_id = r.run_id"
        if has_cost
        else ""
    )
    result = store.query(
        f"""SELECT r.run_id AS run_id, r.workflow AS workflow, r.status AS status,
               ifNull(s.steps, 0) AS steps, r.events AS events, r.bytes AS bytes, {cost} AS cost,
               r.started_at AS started_at, r.ended_at AS ended_at,
               toBool(r.events >= {{we:UInt64}} OR r.bytes >= {{wb:UInt64}}) AS near_limit
        FROM {DATABASE}.runs AS r
        LEFT JOIN ({_STEPS} GROUP BY run_id) AS s ON s.run_id = r.run_id
        {cost_join}
        WHERE {" AND ".join(conditions)}
        ORDER BY {wanted.sort} {direction}, run_id
        LIMIT {{limit:UInt32}}""",
        parameters,
    )
    return Rows(result.columns, list(result.dicts()))


# Steps per run: its decisions, counted from the raw records (the model_calls view may carry
# heavier columns -- prompts, prices -- that a count does not need).
_STEPS = (
    f"SELECT run_id, uniqExactIf(position, type = 'ModelCallScheduled') AS steps FROM {EVENTS} "
    "WHERE fenced = 0 AND type = 'ModelCallScheduled'"
)

_RUN_COLUMNS = [
    "run_id",
    "workflow",
    "status",
    "steps",
    "events",
    "bytes",
    "cost",
    "started_at",
    "ended_at",
    "near_limit",
]


def _runs_then_calls(
    store: QueryStore, conditions: list[str], parameters: dict[str, Any], order: str, has_cost: bool
) -> Rows:
    """The page of runs first, then the calls of only those runs (the raw table is ordered by run
    id, so those queries read a few granules per run instead of every call in the store)."""
    runs = store.query(
        f"""SELECT run_id, workflow, status, events, bytes, started_at, ended_at,
               toBool(events >= {{we:UInt64}} OR bytes >= {{wb:UInt64}}) AS near_limit
        FROM {DATABASE}.runs AS r
        WHERE {" AND ".join(conditions)}
        ORDER BY {order}, run_id
        LIMIT {{limit:UInt32}}""",
        parameters,
    )
    rows = list(runs.dicts())
    ids = {"ids": [str(r["run_id"]) for r in rows]}
    steps = store.query(f"{_STEPS} AND run_id IN {{ids:Array(String)}} GROUP BY run_id", ids)
    steps_of = {str(run): n for run, n in steps.rows}
    cost_of: dict[str, JsonValue] = {}
    if has_cost:
        costs = store.query(
            f"SELECT run_id, sum(cost_usd) FROM {DATABASE}.model_calls "
            "WHERE run_id IN {ids:Array(String)} GROUP BY run_id",
            ids,
        )
        cost_of = {str(run): cost for run, cost in costs.rows}
    for row in rows:
        row["steps"] = steps_of.get(str(row["run_id"]), 0)
        row["cost"] = cost_of.get(str(row["run_id"]))
    return Rows(_RUN_COLUMNS, [{c: row[c] for c in _RUN_COLUMNS} for row in rows])


def workflows(store: QueryStore) -> list[str]:
    """The workflow names the store knows (for the runs page's filter)."""
    # From the records that name it, not the runs view (which would aggregate every run first).
    result = store.query(
        f"SELECT DISTINCT workflow FROM {EVENTS} WHERE fenced = 0 "
        "AND type IN ('RunStarted', 'RunRejected') AND workflow != '' ORDER BY workflow"
    )
    return [str(row[0]) for row in result.rows if row[0] is not None]


def run_summary(store: QueryStore, run_id: str) -> dict[str, JsonValue] | None:
    """One row of the runs view, or None for a run the store does not hold."""
    # The budget that bound the run: a column of the view from migration 15 on.
    budget = ", budget" if "budget" in view_columns(store, "runs") else ""
    result = store.query(
        f"SELECT run_id, workflow, status, started_at, ended_at, last_event_at, events, bytes, partition{budget} "
        f"FROM {DATABASE}.runs WHERE run_id = {{run:String}}",
        {"run": run_id},
    )
    rows = list(result.dicts())
    return rows[0] if rows else None


def run_version(store: QueryStore, run_id: str) -> str:
    """Changes whenever the run gains an event: what the run page polls."""
    result = store.query(
        f"SELECT count(), max(offset) FROM {EVENTS} WHERE run_id = {{run:String}} AND fenced = 0",
        {"run": run_id},
    )
    count, offset = result.rows[0]
    return f"{count}-{offset}"


def call_usage(store: QueryStore, run_id: str) -> dict[int, dict[str, JsonValue]]:
    """Position -> tokens, cost and prompt of the run's model calls, where the store has them."""
    present = view_columns(store, "model_calls")
    wanted = [c for c in (*USAGE_COLUMNS, *PROMPT_COLUMNS) if c in present]
    if not wanted:
        return {}
    result = store.query(
        f"SELECT position, {', '.join(wanted)} FROM {DATABASE}.model_calls WHERE run_id = {{run:String}}",
        {"run": run_id},
    )
    rows = {int(row["position"]): {c: row[c] for c in wanted} for row in result.dicts()}
    resolve_rows(store, run_id, rows)  # what the run stored once and its calls refer to
    return rows


def claims(
    store: QueryStore, topic: str, partition: int, epochs: Sequence[int]
) -> dict[int, Mapping[str, JsonValue]]:
    """Epoch -> the ``EpochClaimed`` record that opened it (its offset is the epoch): when, by whom."""
    if not epochs:
        return {}
    result = store.query(
        f"SELECT offset, occurred_at, worker, previous_epoch FROM {EVENTS} "
        "WHERE run_id = '' AND type = {claim:String} AND topic = {topic:String} "
        "AND partition = {p:Int32} AND offset IN {epochs:Array(Int64)} "
        "AND fenced = 0",  # a fenced claim is a forged one (consumers.claims): it opened no epoch
        {"claim": CLAIM_TYPE, "topic": topic, "p": partition, "epochs": sorted(set(epochs))},
    )
    return {int(row["offset"]): row for row in result.dicts()}
