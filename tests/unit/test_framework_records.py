"""What a PydanticAI tool call records since issue 37's records4: its outcome without the wrapper keys
of a plain return (runtime.integrations.pydantic_ai.returns), its arguments without the unit's name
(``App.tool(carried=...)``); and a run recorded before, in the longer forms, still replays
(tests/golden/pydantic-refund-15-steps.json, recorded by the code before these changes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic_ai.durable_exec import JSON_CODEC
from pydantic_ai.durable_exec._toolset import CallToolResult, wrap_tool_call_result
from pydantic_ai.exceptions import ModelRetry

from runtime.config import Settings
from runtime.integrations.pydantic_ai.returns import compact_outcome, full_outcome
from runtime.log.records.events import Event, RunCompleted, ToolCallCompleted, ToolCallScheduled
from runtime.replay.replayer import Replayer, load_history
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
    [{"order": "7", "status": "delivered"}, "ok", None, [1, 2], {"kind": "tool-return", "x": 1}, {"result": 1}],
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
    assert json.loads(fresh.args) == {k: v for k, v in json.loads(first.args).items() if k != "pydantic_ai_unit"}
    assert fresh.args_hash != first.args_hash
