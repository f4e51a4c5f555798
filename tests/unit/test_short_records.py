"""Framework records as small as native ones (issue 37 item 3): edit entries in their short form,
params referred to by slot, usage recorded beside a framework model result, not in it; and the
records of the earlier forms still read."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from runtime.integrations.calls import ModelResult
from runtime.integrations.pydantic_ai.compact import compact_response
from runtime.integrations.pydantic_ai.units import recorded_response
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled
from runtime.log.records.prompts import PromptBook, PromptMissing, checked_args, rebuild_inputs
from runtime.log.records.references import REF, address, canonical, delta_body, edit_body, edit_of
from runtime.log.records.responses import _iso, full_value
from runtime.worker.calls import completed
from runtime.worker.usage import usage_of
from runtime.workflow.canonical import args_hash, canonical_json
from tests.unit import test_stored_once as stored_once
from tests.unit.test_stored_once import PARAMS, _agent_run

pytestmark = pytest.mark.unit


def _scheduled_events(events: list[Event]) -> list[ModelCallScheduled]:
    return [e for e in events if isinstance(e, ModelCallScheduled)]


def test_a_resent_response_is_its_result_merged_with_the_last_resent_one_and_an_empty_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As PydanticAI's responses are recorded: compact, without the ids it fills in when resending.
    compact = {k: v for k, v in stored_once.RESPONSE.items() if v is not None}
    monkeypatch.setattr(stored_once, "RESPONSE", compact)
    events = _agent_run(PromptBook(), 4)
    third = _scheduled_events(events)[2]  # the second response resent: the first one resent before it
    bases, edit = edit_of("", third.new_messages[0]) or ([], None)
    assert bases[0] == [3, "response"] and isinstance(bases[1], int)  # the result, then an entry's slot
    assert edit == {}  # run_id and conversation_id come from the response resent before
    assert len(third.new_messages[0]) < 40
    for recorded in rebuild_inputs(events).values():
        checked_args(recorded)  # the whole input rebuilt matches its args hash


def test_params_sent_again_are_a_reference_to_an_entry_by_its_slot() -> None:
    events = _agent_run(PromptBook(), 3)
    params = [orjson.loads(e.params or "null") for e in _scheduled_events(events)]
    assert len({canonical_json(p) for p in params}) == 1
    assert set(params[0]) == {REF} and isinstance(params[0][REF], int)
    for recorded in rebuild_inputs(events).values():
        assert checked_args(recorded)["params"] == PARAMS


def test_a_book_rebuilt_from_history_with_its_results_knows_the_short_edit_entries() -> None:
    live = PromptBook()
    events = _agent_run(live, 3)
    rebuilt = PromptBook()
    rebuilt.learn_history(events)
    assert rebuilt.size == live.size
    # Every message the run sent, edit entries included, is found in the rebuilt book: nothing new.
    last = rebuild_inputs(events)[5]
    again = rebuilt.encode(checked_args(last)["messages"], PARAMS)
    assert again.new_messages == [] and rebuilt.size == live.size


def test_a_short_edit_whose_base_is_not_in_the_records_read_is_refused_not_guessed() -> None:
    events = _agent_run(PromptBook(), 3)
    without_results = [e for e in events if not isinstance(e, ModelCallCompleted)]
    with pytest.raises(PromptMissing, match="stored as an edit of"):
        checked_args(rebuild_inputs(without_results)[3])


def test_a_short_edit_altered_in_the_log_shows_as_a_mismatch() -> None:
    events = _agent_run(PromptBook(), 3)
    third = _scheduled_events(events)[2]
    bases, _edit = edit_of("", third.new_messages[0]) or ([], None)
    altered = edit_body(bases, {"k": {"model_name": {"=": "other"}}})
    events[events.index(third)] = dataclasses.replace(third, new_messages=[altered, *third.new_messages[1:]])
    with pytest.raises(PromptMissing, match="does not match its args hash"):
        checked_args(rebuild_inputs(events)[5])


def test_records_of_the_earlier_forms_still_read() -> None:
    """An edit entry with its address and a params reference by address, as written before."""
    response = {"kind": "response", "parts": [{"part_kind": "text", "content": "x" * 200}]}
    first_messages = [{"kind": "request", "parts": [{"content": "hi"}]}]
    big = {"tools": ["t" * 300]}
    big_data = canonical(big)
    first_args = {"messages": first_messages, "params": {"p": big}, "prompt_version": None}
    first = ModelCallScheduled(
        run_id="r1",
        position=1,
        model="m",
        args_hash=args_hash("model", "m", first_args),
        message_count=1,
        message_slots=[1, 1],
        new_roles=["", ""],
        new_messages=[big_data.decode(), canonical(first_messages[0]).decode()],
        params=canonical_json({"p": {REF: address(big_data)}}),
    )
    result = canonical_json({"model": "m", "response": response, "usage": {"input_tokens": 3}})
    done = ModelCallCompleted(run_id="r1", position=1, result=result)
    resent = {**response, "run_id": "r1/a"}
    second_messages = [*first_messages, resent]
    second_args = {"messages": second_messages, "params": {"p": big}, "prompt_version": None}
    second = ModelCallScheduled(
        run_id="r1",
        position=3,
        model="m",
        args_hash=args_hash("model", "m", second_args),
        message_count=2,
        message_slots=[1, 2],
        new_roles=[""],
        new_messages=[
            delta_body(
                address(canonical(resent)),
                {"k": {"run_id": {"=": "r1/a"}}},
                {"call": 1, "path": ["response"]},
            )
        ],
        params=canonical_json({"p": {REF: address(big_data)}}),
    )
    inputs = rebuild_inputs([first, done, second])
    assert checked_args(inputs[1])["params"] == {"p": big}
    assert checked_args(inputs[3])["messages"] == second_messages
    book = PromptBook()
    book.learn_history([first, done, second])
    assert book.encode(second_messages).new_messages == []  # all known, by their addresses


def test_a_framework_model_result_records_only_its_response_and_the_worker_reads_usage_beside_it() -> None:
    response = {
        "kind": "response",
        "parts": [{"part_kind": "text", "content": "done"}],
        "model_name": "gpt-x",
        "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 2},
        "timestamp": "2026-01-01T00:00:00Z",
    }
    result = recorded_response(response)
    assert isinstance(result, ModelResult)
    # Recorded short (runtime.log.records.responses): no outer usage or model, nor inner ones
    recorded = orjson.loads(canonical_json(result))
    assert set(recorded) == {"r"} and "usage" not in recorded["r"] and "model_name" not in recorded["r"]
    usage = usage_of(result)
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.response_model) == (
        12,
        3,
        2,
        "gpt-x",
    )
    # ... and read back whole from the record the worker writes
    command: Any = SimpleNamespace(kind="model", position=3, in_doubt=False)
    event = completed(command, result, 1, 0.0)
    assert isinstance(event, ModelCallCompleted)
    assert full_value(event) == {"response": compact_response(response)}


def test_the_completed_record_carries_the_usage_in_its_own_fields() -> None:
    result = ModelResult({"kind": "response"}, {"input_tokens": 5, "output_tokens": 1}, "m")
    command: Any = SimpleNamespace(kind="model", position=3, in_doubt=False)  # what completed() reads
    event = completed(command, result, 1, 0.0)
    assert isinstance(event, ModelCallCompleted)
    assert orjson.loads(event.result) == {"response": {"kind": "response"}}
    assert (event.input_tokens, event.output_tokens, event.response_model) == (5, 1, "m")


def test_results_recorded_with_usage_in_them_still_give_their_usage() -> None:
    earlier = {"response": {}, "usage": {"input_tokens": 7, "output_tokens": 2}, "model": "m"}
    assert usage_of(earlier).input_tokens == 7 and usage_of(earlier).response_model == "m"


@pytest.mark.parametrize(
    "micros",
    [
        0,
        -1,
        1_764_941_586_000_000,  # no fraction: still six digits
        1_764_941_586_123_456,
        -30_000_000_000_000_000,  # year 1019
        -50_000_000_000_000_000,  # year 385: strftime leaves it unpadded
        253_402_300_799_999_999,  # the last microsecond of year 9999
    ],
)
def test_a_short_timestamp_reads_back_as_the_text_strftime_wrote(micros: int) -> None:
    # The recorded short results were checked against this text: a faster formatter must give it too.
    expected = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    assert _iso(micros) == expected
