"""Unit tests of PydanticAI and OpenAI Agents SDK records kept compact
(runtime.integrations.pydantic_ai.compact, runtime.integrations.openai_agents.compact): default-valued
keys dropped, each compact form read back by the framework's own decoder as the same message, the
full form recorded when it would not; and runs recorded in the full form replay without drift
(runtime.workflow.earlier_form)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from runtime.config import Settings
from runtime.integrations.openai_agents import compact as agents_compact
from runtime.integrations.pydantic_ai import compact, units
from runtime.log.records.events import Event
from runtime.replay.replayer import Replayer
from support.memory_worker import serving

pytestmark = pytest.mark.unit

AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
MESSAGES: dict[str, ModelMessage] = {
    "user prompt": ModelRequest(
        parts=[
            SystemPromptPart("You refund orders.", timestamp=AT),
            UserPromptPart("refund 7", timestamp=AT),
        ],
        instructions="Be brief.",
    ),
    "text": ModelResponse(parts=[TextPart("done")], model_name="m", timestamp=AT),
    "tool calls": ModelResponse(
        parts=[
            ToolCallPart("lookup", {"order": "7", "amount": 0, "note": None}, tool_call_id="c1"),
            ToolCallPart("refund", '{"order": "7"}', tool_call_id="c2"),
        ],
        model_name="m",
        timestamp=AT,
        finish_reason="tool_call",
    ),
    "tool returns": ModelRequest(
        parts=[
            ToolReturnPart(
                "lookup", {"status": None, "items": [], "total": 0}, tool_call_id="c1", timestamp=AT
            ),
            ToolReturnPart("refund", "ok", tool_call_id="c2", timestamp=AT, metadata={"k": 1}),
        ],
        run_id="r/agent/0",
        conversation_id="c",
    ),
    "retry": ModelRequest(
        parts=[
            ToolReturnPart(
                "lookup",
                "order must be a number",
                tool_call_id="c1",
                timestamp=AT,
                outcome="retried",
                retry=RetryInfo("validation_error", attempt=1),
            ),
            RetryFeedbackPart("answer with a number", timestamp=AT, retry=RetryInfo("no_output")),
        ]
    ),
    "thinking": ModelResponse(
        parts=[ThinkingPart("let me think", signature="sig", provider_name="anthropic"), TextPart("42")],
        model_name="m",
        timestamp=AT,
    ),
    "usage with counts": ModelResponse(
        parts=[TextPart("x")],
        usage=RequestUsage(
            input_tokens=120, output_tokens=7, cache_read_tokens=100, details={"reasoning": 3}
        ),
        model_name="m",
        timestamp=AT,
        provider_name="openai",
        provider_response_id="resp_1",
    ),
    # A deferred tool request: the call the agent ends with, and the approval's return after it.
    "deferred tool request": ModelResponse(
        parts=[ToolCallPart("refund", {"order": "7"}, tool_call_id="refund-1")], model_name="m", timestamp=AT
    ),
    "deferred tool result": ModelRequest(
        parts=[ToolReturnPart("refund", "refunded 7", tool_call_id="refund-1", timestamp=AT)]
    ),
}


def _json(message: ModelMessage) -> dict[str, Any]:
    dumped: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    return dumped


def _decoded(message: dict[str, Any]) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([message])[0]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    compact._checked.clear()
    yield
    compact._checked.clear()


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_compact_message_is_smaller_and_decodes_to_the_same_message(name: str) -> None:
    original = MESSAGES[name]
    full = _json(original)
    recorded = compact.compact_response(full) if full["kind"] == "response" else compact.compact_message(full)
    assert recorded != full, "nothing was dropped"
    assert len(orjson.dumps(recorded)) < len(orjson.dumps(full))
    assert _decoded(recorded) == original
    for key in ("kind", "parts"):
        assert recorded[key] == full[key] if key == "kind" else key in recorded
    for part in recorded["parts"]:
        assert "part_kind" in part  # the discriminators PydanticAI reads it back by
    # The user's data is left as it is, nulls and zeros included.
    for compact_part, full_part in zip(recorded["parts"], full["parts"], strict=True):
        for content in ("args", "content"):
            if content in full_part:
                assert compact_part[content] == full_part[content]


def test_a_response_drops_its_null_keys_and_zero_counters() -> None:
    full = _json(MESSAGES["tool calls"])
    recorded = compact.compact_response(full)
    assert set(recorded) == {"kind", "parts", "model_name", "timestamp", "finish_reason"}
    assert set(recorded["parts"][0]) == {"part_kind", "tool_name", "args", "tool_call_id"}
    counted = compact.compact_response(_json(MESSAGES["usage with counts"]))["usage"]
    assert counted == {
        "input_tokens": 120,
        "output_tokens": 7,
        "cache_read_tokens": 100,
        "details": {"reasoning": 3},
    }


def test_when_the_compact_form_would_read_back_otherwise_the_full_form_is_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wrong rule (as if "failed" were a part's default outcome): the check catches it.
    monkeypatch.setitem(compact._STRING_DEFAULTS, "outcome", "failed")
    failed = ModelRequest(
        parts=[ToolReturnPart("refund", "no", tool_call_id="c", timestamp=AT, outcome="failed")]
    )
    full = _json(failed)
    assert "outcome" not in compact.compact_form(full)["parts"][0]
    assert compact.compact_message(full) == full
    # PydanticAI reads a deprecated RetryPromptPart back as a ToolReturnPart: not the same JSON.
    with pytest.warns(Warning, match="RetryPromptPart"):
        legacy = ModelRequest(
            parts=[RetryPromptPart("bad", tool_name="lookup", tool_call_id="c1", timestamp=AT)]
        )
    full = _json(legacy)
    assert compact.compact_message(full) == full
    # Not a message (a streamed result, or anything else): as it is.
    streamed = {"response": _json(MESSAGES["text"]), "events": []}
    assert compact.compact_response(streamed) == streamed


def test_recorded_messages_are_compact_without_request_timestamps_and_know_their_earlier_form() -> None:
    history = [MESSAGES["user prompt"], MESSAGES["tool calls"], MESSAGES["tool returns"]]
    recorded = units.recorded_messages(history)
    assert all("timestamp" not in part for part in recorded[0]["parts"])
    earlier = recorded.earlier()
    assert [m["kind"] for m in earlier] == ["request", "response", "request"]
    assert earlier[1]["provider_details"] is None  # the full form, as recorded before compaction
    assert len(orjson.dumps(list(recorded))) * 2 < len(orjson.dumps(earlier))
    assert orjson.dumps(list(recorded)) == orjson.dumps(units.recorded_messages(history))  # cached: same


def test_openai_agents_items_and_usage_are_recorded_as_set_and_read_back_equal() -> None:
    message = ResponseOutputMessage(
        id="m1",
        content=[ResponseOutputText(text="hi", type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )
    call = ResponseFunctionToolCall(arguments="{}", call_id="c1", name="t", type="function_call", id="f1")
    for item in (message, call):
        recorded = agents_compact.compact_item(item)
        assert None not in recorded.values()
        assert recorded == item.to_input_item() if hasattr(item, "to_input_item") else True
        assert agents_compact._output_item.validate_python(recorded) == item
    usage = Usage(requests=1, input_tokens=12, output_tokens=3)
    recorded_usage = agents_compact.compact_usage(usage)
    assert recorded_usage == {"requests": 1, "input_tokens": 12, "output_tokens": 3}
    assert agents_compact._usage.validate_python(recorded_usage) == usage


def _record(steps: int) -> list[Event]:
    from examples import refund_pydantic_ai

    with serving(refund_pydantic_ai.app, Settings(partitions=1)) as (client, _log):
        handle = client.submit("refund", {"order": "7", "steps": steps})
        handle.result(timeout=60)
        return [e.event for e in handle.events()]


def _full_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record as the code before compaction did: the full form, no earlier form."""
    monkeypatch.setattr(units, "compact_message", lambda message: message)
    monkeypatch.setattr(units, "compact_response", lambda response: response)
    monkeypatch.setattr(units, "Messages", lambda messages, earlier, **_: list(messages))


def test_a_run_recorded_in_the_full_form_replays_without_prompt_drift() -> None:
    from examples import refund_pydantic_ai

    with pytest.MonkeyPatch.context() as patch:
        _full_form(patch)
        history = _record(steps=3)
    assert any('"provider_details":null' in str(e) for e in history)  # recorded in the full form
    replayed = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert replayed.ok and replayed.drift == ()
    # Without the earlier form every model call would be a drifted prompt: the test can fail.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(units, "Messages", lambda messages, earlier, **_: list(messages))
        drifted = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert len(drifted.drift) == 4


def test_a_run_recorded_compact_replays_without_drift_and_holds_no_null_keys() -> None:
    from examples import refund_pydantic_ai

    history = _record(steps=3)
    assert not any('"provider_details":null' in str(e) for e in history)
    replayed = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert replayed.ok and replayed.drift == ()
