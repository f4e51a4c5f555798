"""Model-call inputs whose records refer to what the run stored once: rebuilt in Python.

The ``model_calls`` view rebuilds a prompt from the run's message sequence in SQL (ranges of
entries, blobs from the payloads table). Two entry forms it leaves as they are stored
(runtime.log.records.references): a params value referred to by its address
(``{"agentlog_ref": ...}``: a framework's tool definitions, once per run) and a message stored as
an edit of an earlier entry or of a model call's result (``{"agentlog_delta": ...}``: a response
sent back in the next request). A call showing either is rebuilt here from the run's raw rows
with the runtime's own ``rebuild_inputs`` -- the one implementation the writer's records are read
by -- so ``audit call`` and the UI show the whole request, checked against its args hash as before.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled
from runtime.log.records.payloads import PayloadMissing, sha256_of
from runtime.log.records.prompts import PromptMissing, RecordedInput, blob_refs, rebuild_inputs
from runtime.log.records.references import DELTA, REF

from .results import JsonValue
from .store import QueryStore
from .tables import EVENTS, PAYLOADS

_MARKERS = (f'"{REF}"', f'"{DELTA}"')


def refers(text: JsonValue) -> bool:
    """Whether a view's ``messages`` or ``params`` text holds a reference to rebuild."""
    return isinstance(text, str) and any(marker in text for marker in _MARKERS)


def run_inputs(store: QueryStore, run_id: str) -> dict[int, RecordedInput]:
    """Every model call's input of ``run_id``, rebuilt from its unfenced rows in log order.
    Raises PromptMissing when the rows do not hold what a prompt names."""
    rows = store.query(
        f"""SELECT type, position, model, args_hash, prompt_version, message_count, message_slots,
            new_roles, new_messages, params, result, result_offset, response_model, input_tokens,
            output_tokens, cached_tokens
        FROM {EVENTS}
        WHERE run_id = {{run:String}} AND fenced = 0
          AND type IN ('ModelCallScheduled', 'ModelCallCompleted')
        ORDER BY offset""",
        {"run": run_id},
    ).dicts()
    events: list[Event] = [_event(run_id, row) for row in rows]
    return rebuild_inputs(events, _blobs(store, events))


def _event(run_id: str, row: dict[str, Any]) -> Event:
    if row["type"] == "ModelCallCompleted":
        return ModelCallCompleted(
            run_id=run_id,
            position=row["position"],
            result=row["result"] or "",
            result_offset=row["result_offset"],
            # a framework response recorded short is read back with them (runtime.log.records.responses)
            response_model=row["response_model"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cached_tokens=row["cached_tokens"],
        )
    return ModelCallScheduled(
        run_id=run_id,
        position=row["position"],
        model=row["model"] or "",
        args_hash=row["args_hash"] or "",
        prompt_version=row["prompt_version"],
        message_count=-1 if row["message_count"] is None else row["message_count"],
        message_slots=list(row["message_slots"] or []),
        new_roles=list(row["new_roles"] or []),
        new_messages=list(row["new_messages"] or []),
        params=row["params"],
    )


def _blobs(store: QueryStore, events: list[Event]) -> dict[str, str]:
    """The messages stored out of line that ``events`` point at, as the sink copied them (checked)."""
    wanted = sorted({ref.sha256 for ref in blob_refs(events)})
    if not wanted:
        return {}
    rows = store.query(
        f"SELECT sha256, any(content) AS content FROM {PAYLOADS} WHERE sha256 IN {{shas:Array(String)}} GROUP BY sha256",
        {"shas": wanted},
    ).dicts()
    found: dict[str, str] = {}
    for row in rows:
        content = str(row["content"])
        if sha256_of(content.encode()) != row["sha256"]:
            raise PayloadMissing(f"payload {row['sha256']} in the store does not match its sha256")
        found[str(row["sha256"])] = content
    return found


def resolve_rows(store: QueryStore, run_id: str, rows: dict[int, dict[str, JsonValue]]) -> None:
    """The ``messages`` and ``params`` of a run's call rows (by position) filled in where they refer
    (``explore.call_usage``, the UI's run page); left as the view gave them if the run cannot be rebuilt."""
    if not any(refers(row.get("messages")) or refers(row.get("params")) for row in rows.values()):
        return
    try:
        inputs = run_inputs(store, run_id)
    except (PromptMissing, PayloadMissing):
        return  # the call page (``audit call``) says why, per call
    for position, row in rows.items():
        recorded = inputs.get(position)
        if recorded is not None:
            if "messages" in row:
                row["messages"] = json.dumps(recorded.messages)
            if "params" in row:
                row["params"] = json.dumps(recorded.params)


def resolved(
    store: QueryStore, run_id: str, position: int, messages: JsonValue, params: JsonValue
) -> tuple[JsonValue, JsonValue, str | None]:
    """The call's ``messages`` and ``params`` with what they refer to filled in (as JSON text, as
    the view gives them), and why not if they cannot be: the view's own values are then kept."""
    if not (refers(messages) or refers(params)):
        return messages, params, None
    try:
        recorded = run_inputs(store, run_id).get(position)
    except (PromptMissing, PayloadMissing) as error:
        return messages, params, str(error)
    if recorded is None:
        return messages, params, f"no ModelCallScheduled at position {position} of run {run_id!r}"
    return json.dumps(recorded.messages), json.dumps(recorded.params), None
