"""What one call saw and answered, and what the calls cost: ``audit call`` and ``audit cost``.

The prompt comes from the ``model_calls`` view, which rebuilds it from the run's message sequence
(runtime.log.records.prompts); ``call`` then checks the rebuilt input against the call's recorded args
hash, so a missing or altered record shows as ``verified: false`` with the reason, never as
another prompt. Cost is the view's: the usage each completed attempt reported, priced by the
``model_prices`` row in force when the call was scheduled (analytics.prices).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from runtime.log.records.events import ModelCallCompleted
from runtime.log.records.prompts import PromptMissing, RecordedInput, checked_args
from runtime.log.records.responses import full_value, is_short

from .audit import AuditError, Rows, _ch_time, whatif_condition
from .prompt_inputs import resolved
from .results import JsonValue
from .store import QueryStore
from .tables import DATABASE, EVENTS

COST_KEYS = {
    "run": "c.run_id",
    "workflow": "ifNull(r.workflow, '')",
    "model": "c.priced_model",
    "prompt_version": "ifNull(c.prompt_version, '')",
}


def _json(text: JsonValue) -> JsonValue:
    if not isinstance(text, str):
        return text
    try:
        parsed: JsonValue = json.loads(text)
    except ValueError:
        return text
    return parsed


def _result(store: QueryStore, run_id: str, position: int, kind: str) -> dict[str, JsonValue]:
    rows = list(
        store.query(
            f"""SELECT argMax(result, offset) AS result, argMax(result_offset, offset) AS result_offset,
                argMax(result_sha256, offset) AS result_sha256, argMax(result_size, offset) AS result_size,
                argMax(response_model, offset) AS response_model, argMax(input_tokens, offset) AS input_tokens,
                argMax(output_tokens, offset) AS output_tokens, argMax(cached_tokens, offset) AS cached_tokens
            FROM {EVENTS}
            WHERE run_id = {{run:String}} AND position = {{position:Int32}} AND fenced = 0
              AND type = {{type:String}}""",
            {"run": run_id, "position": position, "type": f"{kind}CallCompleted"},
        ).dicts()
    )
    if not rows or rows[0]["result"] is None:
        return {"result": None}
    row = rows[0]
    if row["result_offset"] is not None:
        return {
            "result": None,
            "result_out_of_line": {
                "offset": row["result_offset"],
                "sha256": row["result_sha256"],
                "size": row["result_size"],
                "read_with": f"agentlog history {run_id} --json --payloads",
            },
        }
    if kind == "Model" and isinstance(row["result"], str) and is_short(row["result"]):
        # A framework response recorded short, shown whole (runtime.log.records.responses).
        return {"result": full_value(_completed(row))}
    return {"result": _json(row["result"])}


def _completed(row: dict[str, Any]) -> ModelCallCompleted:
    return ModelCallCompleted(
        run_id="",
        position=0,
        result=row["result"],
        response_model=row["response_model"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cached_tokens=row["cached_tokens"],
    )


def _verify(row: dict[str, JsonValue], messages: JsonValue, params: JsonValue) -> dict[str, JsonValue]:
    recorded = RecordedInput(
        int(row["position"]),
        str(row["model"]),
        messages if isinstance(messages, list) else None,
        params if isinstance(params, dict) else {},
        row["prompt_version"] if isinstance(row["prompt_version"], str) else None,
        str(row["args_hash"]),
    )
    try:
        checked_args(recorded)
    except PromptMissing as missing:
        return {"verified": False, "verify_error": str(missing)}
    return {"verified": True}


def call(store: QueryStore, run_id: str, position: int) -> dict[str, JsonValue]:
    """The full input and result of the call at ``position`` of ``run_id``."""
    model_rows = list(
        store.query(
            f"""SELECT run_id, position, model, prompt_version, args_hash, messages, params, response_model,
                input_tokens, output_tokens, cached_tokens, cost_usd, priced, copied, attempts, outcome,
                scheduled_at, finished_at, was_in_doubt
            FROM {DATABASE}.model_calls WHERE run_id = {{run:String}} AND position = {{position:Int32}}""",
            {"run": run_id, "position": position},
        ).dicts()
    )
    if model_rows:
        row = model_rows[0]
        # Params values and messages stored once per run and referred to are filled in here.
        texts = resolved(store, run_id, position, row.pop("messages"), row.pop("params"))
        messages, params = _json(texts[0]), _json(texts[1]) or {}
        return {
            "kind": "model",
            **row,
            "params": params,
            "messages": messages,
            **({"prompt_error": texts[2]} if texts[2] else {}),
            **_verify(row, messages, params),
            **_result(store, run_id, position, "Model"),
        }
    tool_rows = list(
        store.query(
            f"""SELECT run_id, position, tool, args, args_hash, effecting, idempotency_key, attempts, outcome,
                scheduled_at, finished_at, was_in_doubt
            FROM {DATABASE}.tool_calls WHERE run_id = {{run:String}} AND position = {{position:Int32}}""",
            {"run": run_id, "position": position},
        ).dicts()
    )
    if tool_rows:
        row = tool_rows[0]
        return {"kind": "tool", **row, "args": _json(row["args"]), **_result(store, run_id, position, "Tool")}
    raise AuditError(f"no model or tool call at position {position} of run {run_id!r} in the store")


# ``--by run``: the budget that bound the run (migration 15), beside what it spent.
_BUDGET_COLUMN = "\n            any(r.budget) AS budget,"


def cost(
    store: QueryStore,
    by: str = "run",
    since: dt.datetime | None = None,
    limit: int = 100,
    whatif: str | None = None,
) -> Rows:
    """Tokens and cost of model calls grouped ``by`` run, workflow, model or prompt_version, highest first.

    ``unpriced_calls`` counts calls that reported usage but have no price for their model: their
    cost is missing from ``cost_usd``, not zero. ``priced_by`` names which of a call's names found
    its price (``response_model``, ``model_param``, ``registered_name``; analytics.prices). Calls a reset or fork copied from its original
    (``model_calls.copied``) are the original's cost and are left out. ``--by run`` shows the budget
    that bound each run (``RunStarted.budget``, JSON; null: none) beside what it spent."""
    key = COST_KEYS.get(by)
    if key is None:
        raise AuditError(f"--by {by!r}: expected one of {', '.join(COST_KEYS)}")
    # Calls a reset or fork copied from the original were paid for once, by the original.
    where = f"WHERE NOT c.copied AND {whatif_condition(whatif, 'c.run_id')}" + (
        " AND c.scheduled_at >= {since:DateTime64(3, 'UTC')}" if since is not None else ""
    )
    result = store.query(
        f"""SELECT
            {key} AS {by},
            count() AS calls,{_BUDGET_COLUMN if by == "run" else ""}
            sum(c.attempts) AS attempts,
            sum(ifNull(c.input_tokens, 0)) AS input_tokens,
            sum(ifNull(c.output_tokens, 0)) AS output_tokens,
            sum(ifNull(c.cached_tokens, 0)) AS cached_tokens,
            round(sum(ifNull(c.cost_usd, 0)), 6) AS cost_usd,
            countIf(NOT c.priced AND (c.input_tokens IS NOT NULL OR c.output_tokens IS NOT NULL)) AS unpriced_calls,
            arrayStringConcat(arraySort(groupUniqArrayIf(c.priced_by, c.priced)), ',') AS priced_by
        FROM {DATABASE}.model_calls AS c
        LEFT JOIN {DATABASE}.runs AS r ON r.run_id = c.run_id
        {where}
        GROUP BY {by}
        ORDER BY cost_usd DESC, {by}
        LIMIT {{limit:UInt32}}""",
        {"since": _ch_time(since) if since is not None else "", "limit": limit, "whatif": whatif or ""},
    )
    return Rows(result.columns, list(result.dicts()))


def whatif_spend(store: QueryStore, since: dt.datetime | None = None) -> tuple[int, float]:
    """The model calls of what-if runs (agentlog whatif) made anew (not copied) and what they cost:
    real calls, paid for, that ``cost`` leaves out of the production spend unless asked -- so its
    output can say how much it left out."""
    after = " AND scheduled_at >= {since:DateTime64(3, 'UTC')}" if since is not None else ""
    result = store.query(
        f"""SELECT count(), round(sum(ifNull(cost_usd, 0)), 6) FROM {DATABASE}.model_calls
        WHERE NOT copied AND run_id IN (SELECT run_id FROM {DATABASE}.runs WHERE whatif IS NOT NULL){after}""",
        {"since": _ch_time(since) if since is not None else ""},
    )
    calls, spent = result.rows[0] if result.rows else (0, 0.0)
    return int(str(calls)), float(str(spent or 0.0))


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def describe_call(found: dict[str, Any]) -> list[str]:
    """``audit call`` as text: the header fields, then the prompt message by message, then the result."""
    skip = {"messages", "result", "args"}
    lines = [f"{name}: {_shown(value)}" for name, value in found.items() if name not in skip]
    if found["kind"] == "model":
        messages = found.get("messages")
        lines.append("messages:" if isinstance(messages, list) else "messages: (not recorded)")
        for i, message in enumerate(messages if isinstance(messages, list) else [], start=1):
            if isinstance(message, dict) and set(message) == {"role", "content"}:
                lines.append(f"  [{i}] {message['role']}: {message['content']}")
            else:
                lines.append(f"  [{i}] {json.dumps(message, ensure_ascii=False)}")
    else:
        lines.append(f"args: {json.dumps(found.get('args'), ensure_ascii=False)}")
    lines.append(f"result: {json.dumps(found.get('result'), ensure_ascii=False)}")
    return lines
