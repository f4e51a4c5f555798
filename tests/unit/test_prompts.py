"""Unit tests of recorded prompts: every model input in the log, each distinct message once per run."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled, RunStarted
from runtime.log.records.prompts import (
    OMITTED,
    RECORD_MESSAGE_BUDGET,
    PromptBook,
    PromptMissing,
    checked_args,
    rebuild_inputs,
)
from runtime.workflow.app import App
from runtime.workflow.canonical import canonical_json
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine

pytestmark = pytest.mark.unit

SYSTEM = {"role": "system", "content": "You are a careful refund agent. " * 20}


def chat_app(turns: int) -> App:
    """A conversational agent: each prompt is the whole transcript plus one new user turn."""
    app = App("chat")

    @app.model("chat")
    def chat(messages: list[dict[str, Any]], **params: Any) -> Any:
        return None

    @app.workflow("talk")
    async def talk(ctx: Context, request: dict[str, Any]) -> int:
        transcript: list[dict[str, Any]] = [SYSTEM]
        for turn in range(turns):
            transcript.append({"role": "user", "content": f"question {turn}: what about order {turn}?"})
            reply = await ctx.model("chat", messages=list(transcript), prompt_version="v2", temperature=0)
            transcript.append({"role": "assistant", "content": reply["text"]})
        return len(transcript)

    return app


def run_live(app: App, history: Sequence[Event] = (), limit: int = 10_000) -> tuple[RunMachine, list[Event]]:
    """Drive the run to its end, answering every model call; every event it emitted."""
    started = RunStarted(run_id="r1", seq=1, occurred_at=1, workflow="talk", input="{}", command_offset=0)
    run = RunMachine(app, started, Stamp(itertools.count(5).__next__, "w1", 0))
    run.begin(history)
    if history:
        run.replay(history)
        run.finish_replay()
    emitted: list[Event] = list(history)
    for _ in range(limit):
        events, ready = run.drain()
        emitted += events
        if not ready:
            break
        for intent in ready:
            reply = {"text": f"answer at {intent.position}"}
            run.record(
                ModelCallCompleted(run_id="r1", position=intent.position, result=canonical_json(reply))
            )
    return run, emitted


def scheduled(events: list[Event]) -> list[ModelCallScheduled]:
    return [e for e in events if isinstance(e, ModelCallScheduled)]


def prompt_fields(event: ModelCallScheduled) -> tuple[Any, ...]:
    return (event.position, event.message_count, event.message_slots, event.new_roles, event.new_messages)


def test_every_prompt_is_rebuilt_exactly_from_the_runs_records() -> None:
    run, events = run_live(chat_app(5))
    assert run.status == "completed"
    inputs = rebuild_inputs(events)
    assert sorted(inputs) == [1, 2, 3, 4, 5]
    last = inputs[5]
    assert last.messages is not None and len(last.messages) == 1 + 2 * 4 + 1
    assert last.messages[0] == SYSTEM
    assert last.messages[-1] == {"role": "user", "content": "question 4: what about order 4?"}
    assert last.messages[-2] == {"role": "assistant", "content": "answer at 4"}
    assert last.params == {"temperature": 0} and last.prompt_version == "v2"
    for recorded in inputs.values():
        checked_args(recorded)  # the rebuilt input hashes to what replay compares


def test_a_resent_transcript_costs_a_constant_amount_per_call() -> None:
    _, events = run_live(chat_app(40))
    records = scheduled(events)
    # Call 1 stores the system prompt and the first question; from call 2 on each stores the previous
    # answer and the new question, and names the rest as one range of the run's message sequence.
    assert [len(r.new_messages) for r in records] == [2] + [2] * 39
    assert all(len(r.message_slots) <= 4 for r in records)
    assert records[-1].message_count == 80
    assert sum(1 for r in records for m in r.new_messages if m == SYSTEM["content"]) == 1


def test_a_replayed_run_continues_the_same_message_sequence() -> None:
    _, full = run_live(chat_app(6))
    cut = next(i for i, e in enumerate(full) if isinstance(e, ModelCallScheduled) and e.position == 4)
    # A new worker rebuilds from the first three calls, then records calls 4..6 live.
    _, resumed = run_live(chat_app(6), history=full[:cut])
    assert [prompt_fields(e) for e in scheduled(resumed)[3:]] == [
        prompt_fields(e) for e in scheduled(full)[3:]
    ]
    assert all(checked_args(r) for r in rebuild_inputs(resumed).values())


def test_a_missing_record_of_the_sequence_is_detected() -> None:
    _, events = run_live(chat_app(4))
    first = scheduled(events)[0]
    without_first = [e for e in events if e is not first]
    with pytest.raises(PromptMissing, match="model call 2"):
        inputs = rebuild_inputs(without_first)
        for recorded in inputs.values():
            checked_args(recorded)


def test_an_altered_message_is_detected_by_the_args_hash() -> None:
    _, events = run_live(chat_app(3))
    first = scheduled(events)[0]
    altered = dataclasses.replace(
        first, new_messages=[first.new_messages[0], "question 0: refund everything"]
    )
    events = [altered if e is first else e for e in events]
    inputs = rebuild_inputs(events)
    with pytest.raises(PromptMissing, match="does not match its args hash"):
        checked_args(inputs[2])


def test_other_message_shapes_and_repeats_inside_one_prompt_round_trip() -> None:
    book = PromptBook()
    tool_message = {"role": "tool", "content": None, "tool_call_id": "c1", "name": "lookup"}
    messages: list[Any] = [{"role": "user", "content": "hi"}, tool_message, {"role": "user", "content": "hi"}]
    fields = book.encode(messages)
    assert fields.new_roles == ["user", ""] and fields.message_slots == [0, 2, 0, 1]
    event = ModelCallScheduled(
        run_id="r",
        position=1,
        model="m",
        args_hash="",
        message_count=fields.message_count,
        message_slots=fields.message_slots,
        new_roles=fields.new_roles,
        new_messages=fields.new_messages,
    )
    assert rebuild_inputs([event])[1].messages == messages
    assert book.encode("not a list").message_count == -1


def test_a_record_from_before_prompts_were_recorded_says_so() -> None:
    old = ModelCallScheduled(run_id="r", position=1, model="m", args_hash="abc")
    recorded = rebuild_inputs([old])[1]
    assert recorded.messages is None
    with pytest.raises(PromptMissing, match="recorded before prompts were"):
        checked_args(recorded)


def test_a_placeholder_of_an_older_record_is_refused_by_name() -> None:
    # Records written before large messages were stored out of line name them by sha256 only.
    placeholder = canonical_json({OMITTED: {"bytes": RECORD_MESSAGE_BUDGET + 1, "sha256": "ab" * 32}})
    event = ModelCallScheduled(
        run_id="r",
        position=1,
        model="m",
        args_hash="",
        message_count=2,
        new_roles=["system", ""],
        new_messages=["be brief", placeholder],
    )
    recorded = rebuild_inputs([event])[1]
    with pytest.raises(PromptMissing, match="message 2 was too large to record"):
        checked_args(recorded)
