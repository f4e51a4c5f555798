"""The audit questions, as queries over the store: each returns rows ready to print or dump as JSON.

Every query reads only non-fenced rows: a fenced zombie's records are kept in the raw table,
flagged ``fenced = 1``, and are never part of a run's timeline, its size or its calls.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.config import Settings
from runtime.errors import TerminalError
from runtime.log.records.status import RUN_STATES

from .results import JsonValue, QueryResult
from .sqlguard import check_read_only
from .store import QueryStore
from .tables import DATABASE, ENVELOPE_NAMES, EVENTS, WRITER_SCHEMAS

_NAME_COLUMNS = ("tool", "model", "workflow", "name", "patch_id", "new_run_id")
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class AuditError(TerminalError):
    """A question the store cannot answer as asked (bad argument, unknown run)."""


@dataclass(frozen=True)
class Rows:
    """Result of an audit question: ordered columns and one mapping per row."""

    columns: list[str]
    rows: list[dict[str, JsonValue]]


def _rows(result: QueryResult) -> Rows:
    return Rows(result.columns, list(result.dicts()))


def iso_to_ms(value: JsonValue) -> JsonValue:
    """An ISO-8601 timestamp from a result back to milliseconds since the epoch (history's unit)."""
    if not isinstance(value, str):
        return value
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def parse_since(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """``--since``: an ISO-8601 date or time (UTC if no zone), or a duration back from now (90s, 15m, 2h, 7d, 1w)."""
    match = _DURATION.match(text.strip())
    current = now or dt.datetime.now(dt.UTC)
    if match:
        return current - dt.timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise AuditError(
            f"--since {text!r}: expected an ISO-8601 time (2025-01-31T12:00) or a duration (15m, 2h, 7d)"
        ) from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _ch_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# -- run timeline -------------------------------------------------------------------------------
def _field_maps(store: QueryStore, schema_ids: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
    if not schema_ids:
        return {}
    result = store.query(
        f"SELECT schema_id, fields, columns FROM {WRITER_SCHEMAS} FINAL WHERE schema_id IN {{ids:Array(Int32)}}",
        {"ids": sorted(set(schema_ids))},
    )
    return {
        int(sid): [(f, c) for f, c in zip(fields, columns, strict=True) if c]
        for sid, fields, columns in result.rows
    }


def run_events(store: QueryStore, run_id: str, topic: str) -> list[dict[str, JsonValue]]:
    """The run's events in log order, each as its writer wrote it (plus where it sits in the log).

    Same events, same order as ``agentlog history RUN --json``: offset order, fenced records out.
    """
    result = store.query(
        f"SELECT * FROM {EVENTS} WHERE run_id = {{run:String}} AND topic = {{topic:String}} AND fenced = 0 "
        "ORDER BY partition, offset",
        {"run": run_id, "topic": topic},
    )
    timestamp_columns = {c for c, t in zip(result.columns, result.types, strict=False) if "DateTime" in t}
    rows = list(result.dicts())
    fields_of = _field_maps(store, [int(str(r["schema_id"])) for r in rows if r["type"]])
    events: list[dict[str, JsonValue]] = []
    for row in rows:
        if not row["type"]:
            events.append(
                {
                    "seq": None,
                    "type": None,
                    "offset": row["offset"],
                    "partition": row["partition"],
                    "decode_error": row["decode_error"],
                }
            )
            continue
        # The run id is the record's Kafka key (the sink stores it whatever the writer schema).
        event: dict[str, JsonValue] = {"seq": row["seq"], "type": row["type"], "run_id": row["run_id"]}
        for field, column in fields_of.get(int(str(row["schema_id"])), [(n, n) for n in ENVELOPE_NAMES]):
            value = row.get(column)
            event[field] = iso_to_ms(value) if column in timestamp_columns else value
        event.update(offset=row["offset"], partition=row["partition"], schema_id=row["schema_id"])
        events.append(event)
    return events


def timeline(events: Sequence[Mapping[str, JsonValue]]) -> Rows:
    """The readable timeline: time, kind, name, key, attempt, schema version per event.

    Outcome events (``...Completed``/``...Failed``) name the call they answer: the tool or model
    and key come from the ``...Scheduled`` event at the same position.
    """
    calls: dict[Any, tuple[JsonValue, JsonValue]] = {}
    rows: list[dict[str, JsonValue]] = []
    for event in events:
        kind = event.get("type")
        name = next((event[c] for c in _NAME_COLUMNS if event.get(c) is not None), None)
        key = event.get("idempotency_key")
        position = event.get("position")
        if isinstance(kind, str) and kind.endswith("Scheduled") and position is not None:
            calls[(kind[: -len("Scheduled")], position)] = (name, key)
        elif isinstance(kind, str) and position is not None and name is None:
            for suffix in ("Completed", "Failed"):
                if kind.endswith(suffix):
                    name, key = calls.get((kind[: -len(suffix)], position), (None, None))
        occurred = event.get("occurred_at")
        when = (
            dt.datetime.fromtimestamp(occurred / 1000, dt.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
            if isinstance(occurred, int)
            else None
        )
        rows.append(
            {
                "offset": event.get("offset"),
                "seq": event.get("seq"),
                "time": when,
                "kind": kind if kind is not None else "<undecodable>",
                "position": position,
                "name": name,
                "key": key,
                "attempt": event.get("attempt"),
                "v": event.get("schema_version"),
                "detail": _detail(event),
            }
        )
    return Rows(["offset", "seq", "time", "kind", "position", "name", "key", "attempt", "v", "detail"], rows)


def _detail(event: Mapping[str, JsonValue]) -> JsonValue:
    for column in ("error", "reason", "message", "replacement", "decode_error"):
        value = event.get(column)
        if value:
            return value
    if event.get("in_doubt"):
        return "in doubt"
    return None


# -- tools, divergences, sizes, runs -------------------------------------------------------------
def whatif_condition(whatif: str | None, run_column: str = "run_id") -> str:
    """The SQL condition on ``run_column`` that keeps what-if runs (agentlog whatif) out of a view of
    production runs unless asked: None leaves them out, "*" keeps every run, a what-if's id keeps
    only its runs (the query's ``whatif`` String parameter, which the caller sets to it)."""
    if whatif == "*":
        return "1 = 1"
    if whatif is None:
        return f"{run_column} NOT IN (SELECT run_id FROM {DATABASE}.runs WHERE whatif IS NOT NULL)"
    return f"{run_column} IN (SELECT run_id FROM {DATABASE}.runs WHERE whatif = {{whatif:String}})"


def tool_attempts(
    store: QueryStore,
    tool: str | None = None,
    since: dt.datetime | None = None,
    limit: int = 100,
    whatif: str | None = None,
) -> Rows:
    """Attempts per idempotency key: a key with more than one completion (or call) is a duplicate effect.
    What-if runs' calls (never made: recorded dry) are left out unless ``whatif`` asks (``whatif_condition``)."""
    conditions = [whatif_condition(whatif, "c.run_id")]
    parameters: dict[str, Any] = {"limit": limit, "whatif": whatif or ""}
    if tool:
        conditions.append("c.tool = {tool:String}")
        parameters["tool"] = tool
    if since is not None:
        conditions.append("c.scheduled_at >= {since:DateTime64(3, 'UTC')}")
        parameters["since"] = _ch_time(since)
    result = store.query(
        f"""SELECT
            c.tool AS tool,
            c.idempotency_key AS idempotency_key,
            groupUniqArray(c.run_id) AS runs,
            count() AS calls,
            sum(c.scheduled) AS scheduled,
            sum(c.attempts) AS attempts,
            sum(c.completions) AS completions,
            sum(c.failures) AS failures,
            max(c.was_in_doubt) AS in_doubt,
            max(c.effecting) AS effect,
            min(c.scheduled_at) AS first_at,
            max(c.finished_at) AS last_at,
            toBool(sum(c.completions) > 1 OR count() > 1) AS duplicate
        FROM {DATABASE}.tool_calls AS c
        WHERE {" AND ".join(conditions)}
        GROUP BY c.tool, c.idempotency_key, if(c.idempotency_key IS NULL, concat(c.run_id, '#', toString(c.position)), '')
        ORDER BY duplicate DESC, last_at DESC
        LIMIT {{limit:UInt32}}""",
        parameters,
    )
    return _rows(result)


def divergences(
    store: QueryStore, run_id: str | None = None, limit: int = 100, whatif: str | None = None
) -> Rows:
    """Re-decided decisions, non-determinism and parked runs, oldest first. What-if runs are left out
    unless ``whatif`` asks (``whatif_condition``) or ``run_id`` names one."""
    where = "WHERE run_id = {run:String}" if run_id else f"WHERE {whatif_condition(whatif)}"
    result = store.query(
        f"SELECT run_id, occurred_at, kind, position, detail FROM {DATABASE}.divergences {where} "
        "ORDER BY occurred_at, run_id, offset LIMIT {limit:UInt32}",
        {"run": run_id or "", "limit": limit, "whatif": whatif or ""},
    )
    return _rows(result)


def history_size(
    store: QueryStore,
    settings: Settings,
    over: str | None = None,
    top: int = 20,
    whatif: str | None = None,
) -> Rows:
    """Runs by history size against the configured thresholds, closest to the warn level first;
    what-if runs left out unless ``whatif`` asks (``whatif_condition``)."""
    if over not in (None, "warn", "limit"):
        raise AuditError("--over must be warn or limit")
    where = {"warn": "WHERE over_warn AND ", "limit": "WHERE over_limit AND ", None: "WHERE "}[over]
    where += whatif_condition(whatif)
    result = store.query(
        f"""SELECT run_id, workflow, status, events, bytes, over_warn, over_limit
        FROM {DATABASE}.history_size(warn_events = {{we:UInt64}}, warn_bytes = {{wb:UInt64}},
                                     limit_events = {{le:UInt64}}, limit_bytes = {{lb:UInt64}})
        {where}
        ORDER BY greatest(events / {{we:UInt64}}, bytes / {{wb:UInt64}}) DESC, run_id
        LIMIT {{top:UInt32}}""",
        {
            "we": settings.history_warn_events,
            "wb": settings.history_warn_bytes,
            "le": settings.history_limit_events,
            "lb": settings.history_limit_bytes,
            "top": top,
            "whatif": whatif or "",
        },
    )
    return _rows(result)


def runs(
    store: QueryStore,
    status: str | None = None,
    limit: int = 50,
    parent: str | None = None,
    whatif: str | None = None,
) -> Rows:
    """Runs, most recently active first; ``status``: only runs in that status (runtime.log.records.status);
    ``parent``: only the child runs that run started (ctx.child), its tree one level down.
    What-if runs (agentlog whatif) are not production runs: left out unless ``whatif`` is "*" (with
    them) or a what-if's id (only its runs)."""
    if status and status not in RUN_STATES:
        raise AuditError(f"--status {status!r}: expected one of {', '.join(RUN_STATES)}")
    which = "whatif IS NULL" if whatif is None else "1 = 1" if whatif == "*" else "whatif = {whatif:String}"
    conditions = [
        c
        for c, on in (("status = {status:String}", status), ("parent_run_id = {parent:String}", parent))
        if on
    ]
    conditions.append(f"({which})")
    where = f"WHERE {' AND '.join(conditions)}"
    result = store.query(
        f"SELECT run_id, workflow, status, started_at, ended_at, events, bytes, parent_run_id{', whatif' if whatif else ''} "
        f"FROM {DATABASE}.runs "
        f"{where} ORDER BY last_event_at DESC LIMIT {{limit:UInt32}}",
        {"status": status or "", "limit": limit, "parent": parent or "", "whatif": whatif or ""},
    )
    return _rows(result)


def whatif_runs(store: QueryStore, whatif: str) -> Rows:
    """A what-if's runs beside their originals (agentlog whatif): status, whether the tool calls from
    the fork position on differ, tokens and cost of each side over that part."""
    result = store.query(
        f"SELECT run_id, origin_run_id, fork_position, status, origin_status, changed, tokens, origin_tokens, "
        f"cost_usd, origin_cost_usd, tool_calls, origin_tool_calls FROM {DATABASE}.whatif_runs "
        "WHERE whatif = {whatif:String} ORDER BY origin_run_id",
        {"whatif": whatif},
    )
    if not result.rows:
        raise AuditError(f"no what-if {whatif!r} in the store (its runs are not there, or not yet sunk)")
    return _rows(result)


def sql(store: QueryStore, statement: str) -> Rows:
    """One read-only statement, as typed."""
    return _rows(store.query(check_read_only(statement), readonly=True))
