"""Unit tests of what a run stores once: large params values referred to by address, and a
message stored as an edit of an earlier entry or of a model call's result
(runtime.log.records.references, runtime.log.records.delta, the PromptBook)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.config import Settings
from runtime.erasure import erase_run
from runtime.log.records.delta import DeltaError, apply, diff
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled
from runtime.log.records.prompts import PromptBook, PromptMissing, checked_args, rebuild_inputs
from runtime.log.records.references import REF, edit_of
from runtime.workflow.canonical import args_hash, canonical_json
from support.memory_worker import serving

pytestmark = pytest.mark.unit

TOOLS = [
    {
        "name": f"tool{i}",
        "description": "Look the order up. " * 4,
        "parameters_json_schema": {"type": "object"},
    }
    for i in range(6)
]
PARAMS = {
    "parameters": {"function_tools": TOOLS, "output_mode": "text", "allow_text_output": True},
    "unit": "u",
}
RESPONSE = {
    "kind": "response",
    "parts": [{"part_kind": "tool-call", "tool_name": "lookup", "args": {"order": "1", "step": 1}}],
    "model_name": "m",
    "run_id": None,
    "conversation_id": None,
    "usage": {"input_tokens": 54, "output_tokens": 6, "cache_read_tokens": 0, "details": {}},
    "provider_details": None,
    "timestamp": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("base", "value"),
    [
        ({"a": 1, "b": None, "c": [1, 2]}, {"a": 1, "b": "x", "c": [1, 3], "d": None}),
        ({"a": {"b": {"c": 1}}, "gone": 1}, {"a": {"b": {"c": 2}}}),
        ([1, 2, 3], [1, 2]),
        ({"n": 1}, {"n": 1.0}),
        ({"n": 1}, {"n": True}),
        ("text", {"now": "an object"}),
        ({"same": [None]}, {"same": [None]}),
    ],
)
def test_an_edit_rebuilds_the_value_exactly(base: Any, value: Any) -> None:
    edit = diff(base, value)
    assert canonical_json(apply(base, edit)) == canonical_json(value)


def test_an_edit_that_does_not_fit_its_base_is_refused() -> None:
    with pytest.raises(DeltaError, match="lacks"):
        apply({"a": 1}, {"k": {"b": {"k": {"c": {"=": 1}}}}})
    with pytest.raises(DeltaError, match="item 5 of 1"):
        apply([1], {"i": {"5": {"=": 2}}})


def _scheduled(
    book: PromptBook, position: int, messages: list[Any], params: dict[str, Any]
) -> ModelCallScheduled:
    """A ModelCallScheduled as scheduling.scheduled_record writes it, args hash over the whole input."""
    fields = book.encode(messages, params)
    args = {"messages": messages, "params": params, "prompt_version": None}
    return ModelCallScheduled(
        run_id="r1",
        position=position,
        model="agent.model",
        args_hash=args_hash("model", "agent.model", args),
        message_count=fields.message_count,
        message_slots=fields.message_slots,
        new_roles=fields.new_roles,
        new_messages=fields.new_messages,
        params=canonical_json(fields.params),
    )


def _completed(book: PromptBook, position: int, response: dict[str, Any]) -> ModelCallCompleted:
    result = canonical_json({"model": "m", "response": response, "usage": {}})
    book.saw_result(position, result)
    return ModelCallCompleted(run_id="r1", position=position, result=result)


def _agent_run(book: PromptBook, steps: int, params: Any = PARAMS) -> list[Event]:
    """A framework agent's records: each request resends the transcript, the last response and
    the tool's return, with the tool definitions in its params."""
    events: list[Event] = []
    transcript: list[Any] = [
        {"kind": "request", "parts": [{"content": "order 1, refund it"}], "run_id": "r1/a"}
    ]
    for step in range(1, steps + 1):
        position = 2 * step - 1
        events.append(_scheduled(book, position, list(transcript), params))
        response = {**RESPONSE, "parts": [{**RESPONSE["parts"][0], "args": {"order": "1", "step": step}}]}
        events.append(_completed(book, position, response))
        # The framework sends the response back with its run's ids filled in, then the tool's return.
        transcript.append({**response, "run_id": "r1/a", "conversation_id": "c-1"})
        transcript.append(
            {
                "kind": "request",
                "parts": [
                    {
                        "content": {"order": "1", "status": "delivered", "step": step},
                        "tool_call_id": f"s{step}",
                    }
                ],
                "run_id": "r1/a",
                "instructions": "Refund the order step by step; one tool per step.",
            }
        )
    return events


def _bases_of(body: str) -> list[Any] | None:
    """What a stored message is an edit of (runtime.log.records.references), None if stored whole."""
    edit = edit_of("", body)
    return None if edit is None else edit[0]


def test_large_params_values_are_stored_once_and_every_call_reads_back_whole() -> None:
    events = _agent_run(PromptBook(), 5)
    scheduled = [e for e in events if isinstance(e, ModelCallScheduled)]
    tools_json = canonical_json(TOOLS)
    holding = [e for e in scheduled if any(tools_json in m for m in e.new_messages)]
    assert [e.position for e in holding] == [1]  # the tool list once, in the first request
    assert all(tools_json not in (e.params or "") for e in scheduled)
    assert all(REF in (e.params or "") for e in scheduled)
    for recorded in rebuild_inputs(events).values():
        assert checked_args(recorded)["params"] == PARAMS  # the hash over the whole input matches


def test_a_response_sent_back_is_an_edit_of_its_recorded_result_not_a_second_copy() -> None:
    events = _agent_run(PromptBook(), 4)
    later = [e for e in events if isinstance(e, ModelCallScheduled) and e.position > 1]
    for event in later:
        assert all('"tool_name":"lookup"' not in m for m in event.new_messages)  # no response stored again
    bases = [[_bases_of(m) for m in e.new_messages] for e in later]
    # The first response sent back: an edit of the result recorded; the later ones, an edit of that
    # result or of the response sent back before (whichever edit is smaller). The tool returns here
    # are too small for an edit to pay (``_EDIT_MIN``, and an edit must save a quarter).
    assert bases[0][0] == [[1, "response"]]
    assert all(entry[0] is not None for entry in bases[1:])
    inputs = rebuild_inputs(events)
    assert len(inputs) == 4
    for recorded in inputs.values():
        checked_args(recorded)


def test_an_edit_whose_base_result_is_not_in_the_records_read_is_refused_not_guessed() -> None:
    events = _agent_run(PromptBook(), 3)
    without_results = [e for e in events if not isinstance(e, ModelCallCompleted)]
    recorded = rebuild_inputs(without_results)[3]
    with pytest.raises(PromptMissing, match="stored as an edit of"):
        checked_args(recorded)


def test_a_changed_tool_definition_is_a_new_entry_and_a_changed_args_hash() -> None:
    book = PromptBook()
    events = _agent_run(book, 2)
    changed = {
        **PARAMS,
        "parameters": {**PARAMS["parameters"], "function_tools": [*TOOLS[:-1], {"name": "new"}]},
    }
    next_call = _scheduled(book, 9, [{"role": "user", "content": "again"}], changed)
    same_call = _scheduled(book, 11, [{"role": "user", "content": "again"}], PARAMS)
    assert (
        next_call.new_messages[:-1] and not same_call.new_messages
    )  # the changed value stored, then nothing
    assert next_call.args_hash != same_call.args_hash
    inputs = rebuild_inputs([*events, next_call, same_call])
    assert checked_args(inputs[9])["params"] == changed
    assert checked_args(inputs[11])["params"] == PARAMS


def test_a_book_rebuilt_from_history_stores_nothing_it_holds_again() -> None:
    live = PromptBook()
    events = _agent_run(live, 3)
    rebuilt = PromptBook()
    for event in events:
        if isinstance(event, ModelCallScheduled):
            rebuilt.learn(event)
    again = rebuilt.encode([{"role": "user", "content": "next"}], PARAMS)
    assert again.new_messages == ["next"] and rebuilt.size == live.size + 1


def test_a_params_value_shaped_like_a_reference_reads_back_as_itself() -> None:
    params = {"odd": {REF: "not an address"}}
    book = PromptBook()
    event = _scheduled(book, 1, [], params)
    assert checked_args(rebuild_inputs([event])[1])["params"] == params


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_the_pydantic_ai_refund_agent_records_its_tools_once_and_every_input_verifies(sealed: bool) -> None:
    """The PydanticAI refund agent on the in-memory log: the tool list in one record, and every
    model call's input rebuilt from the records matches its args hash -- sealed too, where an
    erased run's prompts read as missing, never as something else."""
    from examples import refund_pydantic_ai

    settings = Settings(partitions=1, seal_contents=sealed)
    with serving(refund_pydantic_ai.app, settings) as (client, log):
        handle = client.submit("refund", {"order": "7", "steps": 12})
        handle.result(timeout=60)
        inputs = handle.prompts()
        scheduled = [e.event for e in handle.events() if isinstance(e.event, ModelCallScheduled)]
        if sealed:
            erase_run(client, handle.run_id)
            erased = [e for e in handle.history(payloads=True) if e["type"] == "ModelCallScheduled"]
    assert len(scheduled) == len(inputs) == 13
    assert sum('"name":"create_ticket"' in m for e in scheduled for m in e.new_messages) == 1
    raw = b"".join(r.value or b"" for r in log.records(settings.events_topic, 0))
    assert (b"create_ticket" in raw) is not sealed
    for recorded in inputs.values():
        args = checked_args(recorded)
        tools = [t["name"] for t in args["params"]["parameters"]["function_tools"]]
        assert tools == ["lookup", "send_email", "refund", "create_ticket"]
    assert len(checked_args(inputs[max(inputs)])["messages"]) == 2 * 12 + 1
    if sealed:
        assert all(e["messages"] is None and e["prompt_error"] for e in erased)


def test_output_items_sent_back_one_by_one_are_edits_of_the_result_they_came_in() -> None:
    """The OpenAI Agents SDK's shape: a result holds a list of output items, and the next request
    sends each back as an input item of its own."""
    book = PromptBook()
    items = [
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"order": "1", "reason": "' + "r" * 80 + '"}',
            "id": "fc_1",
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "x" * 60}],
        },
    ]
    first = _scheduled(book, 1, [{"role": "user", "content": "refund order 1"}], {})
    result = canonical_json({"response": {"output": items, "usage": {}}, "usage": {}, "model": None})
    book.saw_result(1, result)
    completed = ModelCallCompleted(run_id="r1", position=1, result=result)
    sent_back = [
        {"role": "user", "content": "refund order 1"},
        *items,
        {"type": "function_call_output", "output": "ok"},
    ]
    second = _scheduled(book, 3, sent_back, {})
    bases = [_bases_of(m) for m in second.new_messages]
    assert bases[:2] == [[[1, "response", "output", 0]], [[1, "response", "output", 1]]]
    assert checked_args(rebuild_inputs([first, completed, second])[3])["messages"] == sent_back
