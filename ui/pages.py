"""The pages -- runs, one run, a diff, a what-if -- as HTML, from the store's answers.

Each function takes an open read-only store and the request's parameters and returns the page.
Templates and assets are package data (``ui/templates``, ``ui/static``): nothing is fetched from
the internet and nothing needs building.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import jinja2
from markupsafe import Markup

from analytics import audit, explore, vouched
from analytics import diff as run_diff
from analytics.audit import AuditError, parse_since, run_events
from analytics.results import JsonValue
from analytics.store import QueryStore
from runtime.config import Settings
from runtime.log.records.status import RUN_STATES

from . import svg, timeline

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("ui", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)


class NotFound(Exception):
    """A run (or page) the store does not hold."""


def _bytes(value: Any) -> str:
    if not isinstance(value, int | float):
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _cost(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _budget(recorded: Any) -> list[str]:
    """The budget that bound a run (RunStarted.budget, JSON) as the run page lists it; [] for none."""
    if not isinstance(recorded, str) or not recorded:
        return []
    fields = json.loads(recorded)
    limits = [f"{k.replace('_', ' ')} {v}" for k, v in fields.items() if k != "on_exceeded"]
    return [*limits, f"on exceeded: {fields.get('on_exceeded', 'fail')}"]


def _when(value: Any) -> str:
    if isinstance(value, int):
        value = dt.datetime.fromtimestamp(value / 1000, dt.UTC).isoformat(timespec="milliseconds")
    return str(value).replace("T", " ").replace("Z", "").replace("+00:00", "") if value else ""


def _pretty(value: Any) -> str:
    """JSON text pretty-printed; other values as they are."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return json.dumps(parsed, indent=2, ensure_ascii=False)
    return json.dumps(value, indent=2, ensure_ascii=False)


_ENV.filters.update(bytes=_bytes, cost=_cost, when=_when, pretty=_pretty)


def _render(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "") in ("1", "true", "on", "yes")


def _limit(text: str | None, default: int = 200, most: int = 5000) -> int:
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise AuditError(f"limit {text!r}: expected a number from 1 to {most}")
    return int(text)


def runs_page(store: QueryStore, settings: Settings, query: Mapping[str, str]) -> str:
    sort = query.get("sort") or "started_at"
    wanted = explore.RunFilter(
        status=query.get("status") or None,
        workflow=query.get("workflow") or None,
        since=parse_since(query["since"]) if query.get("since") else None,
        until=parse_since(query["until"]) if query.get("until") else None,
        near_limit=_flag(query, "near"),
        sort=sort,
        descending=query.get("dir", "desc") != "asc",
        limit=_limit(query.get("limit")),
    )
    rows = explore.run_list(store, settings, wanted)
    # With the workers' public key: a run whose status rests on a record no worker signed shows FORGED.
    forged = vouched.forged_statuses(store, settings, [str(r["run_id"]) for r in rows.rows])
    for row in rows.rows:
        row["forged"] = forged.get(str(row["run_id"]))
    has_cost = any(r.get("cost") is not None for r in rows.rows)
    return _render(
        "runs.html",
        title="runs",
        rows=rows.rows,
        has_cost=has_cost,
        query=dict(query),
        statuses=RUN_STATES,
        workflows=explore.workflows(store),
        sort=sort,
        descending=wanted.descending,
        sorts=explore.RUN_SORTS,
        limit=wanted.limit,
    )


def _timeline(
    store: QueryStore, settings: Settings, run_id: str
) -> tuple[dict[str, JsonValue], timeline.Timeline]:
    summary = explore.run_summary(store, run_id)
    if summary is None:
        raise NotFound(f"no run {run_id!r} in the store")
    events = run_events(store, run_id, settings.events_topic)
    epochs = sorted({int(e["epoch"]) for e in events if isinstance(e.get("epoch"), int)})
    partition = summary.get("partition")
    claims = (
        explore.claims(store, settings.events_topic, int(partition), epochs)
        if isinstance(partition, int)
        else {}
    )
    usage = explore.call_usage(store, run_id)
    now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000) if summary.get("status") == "running" else None
    return summary, timeline.build(events, claims, usage, now_ms)


def run_data(store: QueryStore, settings: Settings, run_id: str) -> dict[str, Any]:
    """Everything the run page shows, gathered once (the page and its live refresh share it).

    A call's details (prompt, arguments, result...) are not in it: the page fetches them when a
    call or step is clicked (``run_calls``), so a 10,000-event run's page stays small."""
    version = explore.run_version(store, run_id)  # before the status: see ``run_version``
    summary, line = _timeline(store, settings, run_id)
    paid = [c for c in line.calls if not c.usage.get("copied")]  # copied calls: the original paid
    cost = [c.usage.get("cost_usd") for c in paid if isinstance(c.usage.get("cost_usd"), int | float)]
    tokens = {
        key: sum(v for c in paid if isinstance(v := c.usage.get(key), int))
        for key in ("input_tokens", "output_tokens", "cached_tokens")
        if any(c.usage.get(key) is not None for c in line.calls)
    }
    # Why there is no cost, when there is none: the store has no cost column (before pricing was
    # recorded), the calls reported no token usage, or no price matches their model.
    if cost:
        cost_state = "priced"
    elif "cost_usd" not in explore.view_columns(store, "model_calls"):
        cost_state = "absent"
    else:
        cost_state = "unpriced" if tokens else "no_usage"
    return {
        "run": summary,
        # With the workers' public key: the status record no worker signed (shown FORGED), or None.
        "forged": vouched.forged_statuses(store, settings, [run_id]).get(run_id),
        "timeline": line,
        "svg": Markup(svg.render(line)),
        "cost": sum(cost) if cost else None,
        "cost_state": cost_state,
        "tokens": tokens,
        "budget": _budget(summary.get("budget")),
        "version": version,
        "gauge_events": Markup(
            svg.gauge(
                int(summary.get("events") or 0),
                settings.history_warn_events,
                settings.history_limit_events,
                "events",
            )
        ),
        "gauge_bytes": Markup(
            svg.gauge(
                int(summary.get("bytes") or 0),
                settings.history_warn_bytes,
                settings.history_limit_bytes,
                "bytes",
            )
        ),
        "settings": settings,
    }


def run_page(store: QueryStore, settings: Settings, run_id: str) -> str:
    data = run_data(store, settings, run_id)
    return _render("run.html", title=f"run {run_id}", **data)


def run_main(store: QueryStore, settings: Settings, run_id: str) -> str:
    """The part of the run page that changes as events arrive (the live refresh swaps it in)."""
    return _render("run_main.html", **run_data(store, settings, run_id))


def run_calls(store: QueryStore, settings: Settings, run_id: str, query: Mapping[str, str]) -> str:
    """The details of the calls at ``positions`` (comma-separated) or of one ``step``: a fragment."""
    _, line = _timeline(store, settings, run_id)
    try:
        if query.get("step"):
            calls = line.step_calls(int(query["step"]))
        else:
            wanted = {int(p) for p in query.get("positions", "").split(",") if p.strip()}
            calls = [c for c in line.calls if c.position in wanted]
    except ValueError as exc:
        raise AuditError(f"positions and step are numbers: {exc}") from exc
    return _render("calls.html", calls=calls)


def run_version(store: QueryStore, run_id: str) -> dict[str, JsonValue]:
    """What the run page polls. The version is read before the status: the sink may insert rows
    between the two reads, and a status older than the version (running, beside the count that
    includes the ending) would leave the page polling a version that never changes again, its
    status "running" forever. Read in this order the status is never older than the version."""
    version = explore.run_version(store, run_id)
    summary = explore.run_summary(store, run_id)
    if summary is None:
        raise NotFound(f"no run {run_id!r} in the store")
    return {"version": version, "status": summary.get("status")}


def diff_page(store: QueryStore, settings: Settings, query: Mapping[str, str]) -> str:
    run_a, run_b = query.get("a", "").strip(), query.get("b", "").strip()
    result: dict[str, Any] | None = None
    error = None
    if run_a and run_b:
        try:
            result = run_diff.diff_runs(store, run_a, run_b, settings.events_topic)
        except AuditError as exc:
            error = str(exc)
    return _render("diff.html", title="diff", a=run_a, b=run_b, result=result, error=error)


def whatif_page(store: QueryStore, whatif_id: str) -> str:
    """A what-if's runs (agentlog whatif) beside their originals, each with a link to their diff."""
    try:
        rows = audit.whatif_runs(store, whatif_id)
    except AuditError as exc:
        raise NotFound(str(exc)) from exc
    found = rows.rows
    return _render(
        "whatif.html",
        title=f"what-if {whatif_id}",
        whatif=whatif_id,
        rows=found,
        changed=sum(1 for r in found if r["changed"]),
    )


def error_page(status: int, message: str) -> str:
    return _render("error.html", title=f"{status}", status=status, message=message)
