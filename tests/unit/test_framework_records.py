"""What a PydanticAI agent's calls record since issue 37's records4: a tool call's outcome without the
wrapper keys of a plain return (runtime.integrations.pydantic_ai.returns), its arguments without the
unit's name (``App.tool(carried=...)``), a model response without what its record's fields hold
(runtime.log.records.responses); each read back whole, and a run recorded before, in the longer
forms, still replays (tests/golden/pydantic-refund-15-steps.json, recorded by the code before)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from pydantic_ai.durable_exec import JSON_CODEC
from pydantic_ai.durable_exec._toolset import CallToolResult, wrap_tool_call_result
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.usage import RequestUsage

from runtime.config import Settings
from runtime.integrations.calls import ModelResult
from runtime.integrations.pydantic_ai import units
from runtime.integrations.pydantic_ai.message_forms import MessageForms
from runtime.integrations.pydantic_ai.returns import compact_outcome, full_outcome
from runtime.log.records.delta import apply, diff
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    RunCompleted,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.log.records.prompts import PromptBook, checked_args, rebuild_inputs
from runtime.log.records.responses import full_text, full_value, short_result
from runtime.replay.replayer import Replayer, load_history
from runtime.worker.calls import completed
from runtime.workflow.canonical import args_hash_and_size, model_args_hash_and_size
from support.memory_worker import serving

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pydantic-refund-15-steps.json"


async def _raises_retry() -> Any:
    raise ModelRetry("again")


async def _returns(value: Any) -> Any:
    return value


async def _outcome(value: Any) -> Any:
    return JSON_CODEC.dump(CallToolResult, await wrap_tool_call_result(_returns(value)))


async def _retry_outcome() -> Any:
    return JSON_CODEC.dump(CallToolResult, await wrap_tool_call_result(_raises_retry()))


@pytest.mark.parametrize(
    "value",
    [
        {"order": "7", "status": "delivered"},
        "ok",
        None,
        [1, 2],
        {"kind": "tool-return", "x": 1},
        {"result": 1},
    ],
)
async def test_a_plain_return_is_recorded_without_its_wrapper_and_read_back_whole(value: Any) -> None:
    outcome = await _outcome(value)
    recorded = compact_outcome(outcome)
    assert full_outcome(orjson.loads(orjson.dumps(recorded))) == outcome
    if outcome.get("kind") == "tool_return":
        assert recorded == {"result": value}
    # PydanticAI's own decoder reads the restored form as the value the tool returned
    decoded = JSON_CODEC.load(CallToolResult, full_outcome(recorded))
    assert decoded.result == value  # type: ignore[union-attr]  # a _ToolReturn here


async def test_other_outcomes_and_those_recorded_before_are_kept_as_they_are() -> None:
    retry = await _retry_outcome()
    assert compact_outcome(retry) == retry and full_outcome(retry) == retry
    before = {"content_file_digests": [], "kind": "tool_return", "result": {"a": 1}}
    assert full_outcome(before) == before
    with_files = {"content_file_digests": ["d"], "kind": "tool_return", "result": {"a": 1}}
    assert compact_outcome(with_files) == with_files


def _record(steps: int) -> list[Event]:
    from examples import refund_pydantic_ai

    with serving(refund_pydantic_ai.app, Settings(partitions=1)) as (client, _log):
        handle = client.submit("refund", {"order": "48211", "steps": steps})
        handle.result(timeout=60)
        return [e.event for e in handle.events()]


def test_a_tool_call_records_its_arguments_and_return_without_framework_wrappers() -> None:
    history = _record(steps=2)
    scheduled = [e for e in history if isinstance(e, ToolCallScheduled)]
    completed = [e for e in history if isinstance(e, ToolCallCompleted)]
    assert [json.loads(e.args) for e in scheduled] == [
        {"order": "48211", "step": 1},
        {"order": "48211", "step": 2},
    ]
    assert json.loads(completed[0].result) == {"result": {"order": "48211", "status": "delivered", "step": 1}}


def test_a_run_recorded_before_replays_to_its_result_and_keeps_its_effect_key() -> None:
    from examples import refund_pydantic_ai

    history = load_history(GOLDEN)
    effect = next(e for e in history if isinstance(e, ToolCallScheduled) and e.effect)
    assert "pydantic_ai_unit" in (effect.args or "")  # recorded in the longer forms
    assert any('"content_file_digests":[]' in e.result for e in history if isinstance(e, ToolCallCompleted))
    replayed = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert replayed.ok and replayed.drift == ()
    ended = history[-1]
    assert isinstance(ended, RunCompleted)
    assert replayed.result == json.loads(ended.result)
    # The hashes of today's calls differ from the recorded ones: the earlier form is what matched.
    fresh = next(e for e in _record(steps=1) if isinstance(e, ToolCallScheduled))
    first = next(e for e in history if isinstance(e, ToolCallScheduled))
    assert json.loads(fresh.args) == {
        k: v for k, v in json.loads(first.args).items() if k != "pydantic_ai_unit"
    }
    assert fresh.args_hash != first.args_hash


# --- a model response recorded short (runtime.log.records.responses) ---------------------------------
def _response_json(response: ModelResponse) -> dict[str, Any]:
    dumped: dict[str, Any] = JSON_CODEC.dump(ModelResponse, response)
    return dumped


AT = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
RESPONSES = {
    "tool call": ModelResponse(
        parts=[ToolCallPart("lookup", {"order": "7"}, tool_call_id="c1")],
        model_name="gpt-x",
        usage=RequestUsage(input_tokens=120, output_tokens=7, cache_read_tokens=100),
        timestamp=AT,
    ),
    "no usage, no model": ModelResponse(parts=[TextPart("done")], timestamp=AT),
    "whole second": ModelResponse(
        parts=[TextPart("x")], model_name="m", timestamp=datetime(2026, 5, 1, tzinfo=UTC)
    ),
    "other counters kept": ModelResponse(
        parts=[TextPart("x")],
        model_name="m",
        usage=RequestUsage(input_tokens=5, output_tokens=1, cache_write_tokens=3, details={"reasoning": 2}),
        timestamp=AT,
    ),
}


def _completed_with(result: ModelResult) -> ModelCallCompleted:
    command: Any = SimpleNamespace(kind="model", position=1, in_doubt=False)
    event = completed(command, result, 1, 0.0)
    assert isinstance(event, ModelCallCompleted)
    return event


@pytest.mark.parametrize("name", list(RESPONSES))
def test_a_response_recorded_short_reads_back_byte_for_byte_with_its_records_fields(name: str) -> None:
    full = _response_json(RESPONSES[name])
    full["request_timestamp"] = "2026-05-01T11:59:59.999000Z"
    full["duration"] = "PT0.12S"
    usage = full.get("usage") or {}
    counts = {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens")}
    counts["cached_tokens"] = usage.get("cache_read_tokens")
    event = _completed_with(
        ModelResult(
            full, {k: v for k, v in counts.items() if v is not None}, full.get("model_name"), short=True
        )
    )
    recorded = orjson.loads(event.result)
    assert set(recorded) == {"r"} and "kind" not in recorded["r"]
    assert len(event.result) < len(orjson.dumps({"response": full}))
    assert full_value(event) == {"response": full}
    assert orjson.loads(full_text(event)) == {"response": full}
    # PydanticAI reads it as the same response
    assert JSON_CODEC.load(ModelResponse, full_value(event)["response"]) == JSON_CODEC.load(
        ModelResponse, full
    )


def test_a_response_keeps_what_its_records_fields_do_not_hold() -> None:
    full = _response_json(RESPONSES["tool call"])
    # The record will hold another count and no model: the response keeps its own values.
    result = ModelResult(full, {"input_tokens": 1}, None, short=True)
    event = _completed_with(result)
    assert full_value(event)["response"]["usage"]["input_tokens"] == 120
    # A result that is not a response stays as it is
    assert short_result({"kind": "other"}, "m", {}) is None
    assert short_result("text", "m", {}) is None
    # results recorded before read as they are
    before = ModelCallCompleted(run_id="r", position=1, result='{"response":{"kind":"response"}}')
    assert full_text(before) == before.result


def test_a_pydantic_ai_run_recorded_short_replays_and_audit_bases_resolve() -> None:
    from examples import refund_pydantic_ai

    history = _record(steps=3)
    results = [e for e in history if isinstance(e, ModelCallCompleted)]
    assert results and all(e.result.startswith('{"r":') for e in results)
    assert all('"model_name"' not in e.result and '"usage"' not in e.result for e in results)
    replayed = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert replayed.ok and replayed.drift == ()
    # the whole request of each call, rebuilt from the records and checked against its args hash
    inputs = rebuild_inputs(history)
    last = checked_args(inputs[max(inputs)])
    responses = [m for m in last["messages"] if m.get("kind") == "response"]
    assert len(responses) == 3 and all(r["model_name"] and r["usage"]["input_tokens"] for r in responses)


def test_an_edit_sets_a_value_that_is_not_an_object_bare_and_reads_either_form() -> None:
    base = {"parts": [{"content": {"step": 1}, "tool_call_id": "a"}], "n": None}
    value = {"parts": [{"content": {"step": 2}, "tool_call_id": "b"}], "n": [1], "new": {"x": 0}}
    edit = diff(base, value)
    assert edit == {
        "k": {
            "n": [1],
            "new": {"=": {"x": 0}},  # an object is still wrapped: a bare one would read as an edit
            "parts": {"i": {"0": {"k": {"content": {"k": {"step": 2}}, "tool_call_id": "b"}}}},
        }
    }
    assert apply(base, edit) == value
    # the form records written before hold
    before = {
        "k": {
            "n": {"=": [1]},
            "new": {"=": {"x": 0}},
            "parts": {"i": {"0": {"k": {"content": {"k": {"step": {"=": 2}}}, "tool_call_id": {"=": "b"}}}}},
        }
    }
    assert apply(base, before) == value
    for falsy in (0, False, "", [], None):
        assert apply({"a": 1}, diff({"a": 1}, {"a": falsy})) == {"a": falsy}


# --- each message turned once per agent run (runtime.integrations.pydantic_ai.message_forms) ---------
def test_a_transcripts_messages_are_turned_once_and_again_when_pydantic_ai_changes_one() -> None:
    request = ModelRequest(parts=[UserPromptPart("refund 7")])
    response = ModelResponse(parts=[TextPart("done")], model_name="m")
    turned: list[Any] = []

    def turn(message: Any) -> tuple[dict[str, Any], dict[str, Any], tuple[bytes, bytes]]:
        turned.append(message)
        form: dict[str, Any] = {"kind": message.kind, "run_id": getattr(message, "run_id", None)}
        return form, form, (b"", b"")

    forms = MessageForms()
    forms.forms([request], turn)
    forms.forms([request, response], turn)
    assert turned == [request, response]  # the first message not again
    response.run_id = "r/agent/0"  # PydanticAI assigns a field of a message it sends back
    recorded = [form for form, _, _ in forms.forms([request, response], turn)]
    assert turned == [request, response, response] and recorded[1]["run_id"] == "r/agent/0"
    response.parts = [TextPart("other")]  # a part replaced
    forms.forms([request, response], turn)
    assert len(turned) == 4
    # an equal message that is another object is turned on its own
    forms.forms([ModelRequest(parts=[UserPromptPart("refund 7")]), response], turn)
    assert len(turned) == 5
    # a field given an equal value that is another object: turned again (identity, not equality:
    # 1 == 1.0 == True, and their JSON differs)
    response.usage = RequestUsage(**dataclasses.asdict(response.usage))
    forms.forms([request, response], turn)
    assert len(turned) == 7  # the request too: the earlier call held another object in its place
    forms.forms([request, response], turn)
    assert len(turned) == 7


def test_recorded_messages_read_the_same_with_and_without_the_kept_forms() -> None:
    request = ModelRequest(parts=[UserPromptPart("refund 7")], instructions="Be brief.")
    response = ModelResponse(
        parts=[ToolCallPart("lookup", {"order": "7"}, tool_call_id="c1")],
        model_name="m",
        usage=RequestUsage(input_tokens=5, output_tokens=1),
    )
    messages = [request, response]
    kept = units.recorded_messages(messages, MessageForms())
    assert list(kept) == list(units.recorded_messages(messages))
    assert kept.earlier() == units.recorded_messages(messages).earlier()
    # The kept canonical JSON and digests are exactly the messages', and so are the hash and the
    # message sequence made from them (runtime.workflow.earlier_form.Messages.encoded).
    assert kept.encoded is not None
    for message, (text, digest) in zip(kept, kept.encoded, strict=True):
        assert text == orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
        assert digest == hashlib.sha256(text).digest()
    params = {"tools": [{"name": "lookup", "description": "ünïcode", "x": 1.5}]}
    for version in (None, "v2"):
        whole = {"messages": list(kept), "params": params, "prompt_version": version}
        assert model_args_hash_and_size("m.model", kept.encoded, params, version) == args_hash_and_size(
            "model", "m.model", whole
        )
    assert PromptBook().encode(kept, params, kept.encoded) == PromptBook().encode(list(kept), params)
