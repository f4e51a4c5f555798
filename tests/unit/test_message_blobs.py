"""A model message too large for its record is stored out of line, in the payloads topic, once per
run; readers get it back whole and checked by sha256 (the in-memory log; tests/integration has the
same through Kafka and the analytics store)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import ModelCallScheduled
from runtime.log.records.payloads import PayloadMissing, read_blobs
from runtime.log.records.prompts import (
    RECORD_MESSAGE_BUDGET,
    UNSTORED,
    PromptBook,
    PromptMissing,
    blob_refs,
    checked_args,
    located,
    rebuild_inputs,
)
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import SETTINGS, Harness

pytestmark = pytest.mark.unit

SYSTEM = {"role": "system", "content": "You read contracts."}
CONTRACT = {"role": "user", "content": "clause " * (600 * 1024 // 7)}  # ~600 KiB
FOLLOW_UP = {"role": "user", "content": "and the refund clause?"}


def contract_app() -> App:
    """Two calls: the contract, then the whole transcript again with one more question."""
    app = App("contracts")

    @app.model("reader")
    def reader(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return {"text": f"read {len(messages)} messages"}

    @app.workflow("review")
    async def review(ctx: Context, request: dict[str, Any]) -> int:
        first = await ctx.model("reader", messages=[SYSTEM, CONTRACT])
        transcript = [SYSTEM, CONTRACT, {"role": "assistant", "content": first["text"]}, FOLLOW_UP]
        await ctx.model("reader", messages=transcript)
        return len(transcript)

    return app


def scheduled_event(fields: Any, position: int = 1) -> ModelCallScheduled:
    return ModelCallScheduled(
        run_id="r",
        position=position,
        model="reader",
        args_hash="",
        message_count=fields.message_count,
        message_slots=fields.message_slots,
        new_roles=fields.new_roles,
        new_messages=fields.new_messages,
    )


def canonical(message: Any) -> bytes:
    return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)


async def test_a_message_over_the_record_budget_round_trips_through_the_payloads_topic() -> None:
    h = Harness(contract_app())
    h.start()
    run = h.client.submit("review", {}).run_id
    status = await h.ended(run)
    assert status.status == "completed" and status.result == 4
    stored = list(h.log.read(h.settings.payloads_topic, h.client.run(run).partition))
    assert [r.value for r in stored] == [canonical(CONTRACT)], "the contract is stored once, whole"
    sizes = [e.size for e in h.client.run(run).events() if isinstance(e.event, ModelCallScheduled)]
    assert len(sizes) == 2 and max(sizes) < 2_000, "the records carry a pointer, not the contract"
    inputs = h.client.run(run).prompts()
    assert inputs[1].messages == [SYSTEM, CONTRACT]
    assert inputs[2].messages == [
        SYSTEM,
        CONTRACT,
        {"role": "assistant", "content": "read 2 messages"},
        FOLLOW_UP,
    ]
    assert all(checked_args(recorded) for recorded in inputs.values())  # the args hashes agree
    shown = [e for e in h.client.run(run).history(payloads=True) if e["type"] == "ModelCallScheduled"]
    assert [e["messages"] for e in shown] == [inputs[1].messages, inputs[2].messages]
    await h.stop_all()


def test_a_message_over_the_budget_becomes_a_pointer_and_its_blob() -> None:
    fields = PromptBook().encode([SYSTEM, CONTRACT])
    sha = hashlib.sha256(canonical(CONTRACT)).hexdigest()
    assert fields.blobs == {sha: canonical(CONTRACT)}
    assert fields.new_roles == ["system", ""] and len(fields.new_messages[1]) < 200
    (ref,) = blob_refs([scheduled_event(fields)])
    assert (ref.sha256, ref.size, ref.partition, ref.offset) == (
        sha,
        len(canonical(CONTRACT)),
        UNSTORED,
        UNSTORED,
    )
    (ref,) = blob_refs([located(scheduled_event(fields), 2, {sha: 41})])
    assert (ref.partition, ref.offset) == (2, 41)


def test_messages_under_the_budget_stay_in_the_record() -> None:
    small = {"role": "user", "content": "x" * (RECORD_MESSAGE_BUDGET // 2)}
    fields = PromptBook().encode([small])
    assert fields.blobs == {} and fields.new_roles == ["user"]


def test_a_book_rebuilt_from_history_knows_a_stored_blob_by_its_sha256() -> None:
    first = PromptBook().encode([SYSTEM, CONTRACT])
    sha = next(iter(first.blobs))
    book = PromptBook()
    book.learn(located(scheduled_event(first), 0, {sha: 0}))
    again = book.encode([SYSTEM, CONTRACT, FOLLOW_UP])
    assert again.blobs == {} and again.new_messages == [FOLLOW_UP["content"]], "not stored a second time"


def test_a_prompt_whose_blob_was_not_read_back_is_refused_by_name() -> None:
    fields = PromptBook().encode([CONTRACT])
    sha = next(iter(fields.blobs))
    recorded = rebuild_inputs([located(scheduled_event(fields), 0, {sha: 3})])[1]
    with pytest.raises(
        PromptMissing, match=rf"message 1 is stored out of line .* payloads\[0\]@3, sha256 {sha}"
    ):
        checked_args(recorded)


def test_an_altered_or_missing_blob_is_detected_by_its_sha256() -> None:
    log = MemoryLog(SETTINGS)
    topic = SETTINGS.payloads_topic
    fields = PromptBook().encode([CONTRACT])
    sha = next(iter(fields.blobs))
    altered = canonical({"role": "user", "content": "clause " * 10})
    offset = log.append(topic, 0, b"r", altered).result()
    event = located(scheduled_event(fields), 0, {sha: offset})
    with pytest.raises(PayloadMissing, match=rf"message stored out of line at .*@{offset} .* sha256 {sha}"):
        read_blobs(log, topic, [event])
    with pytest.raises(PayloadMissing, match=rf"@{offset + 5} is missing"):
        read_blobs(log, topic, [located(scheduled_event(fields), 0, {sha: offset + 5})])
    intact = log.append(topic, 0, b"r", canonical(CONTRACT)).result()
    blobs = read_blobs(log, topic, [located(scheduled_event(fields), 0, {sha: intact})])
    assert rebuild_inputs([located(scheduled_event(fields), 0, {sha: intact})], blobs)[1].messages == [
        CONTRACT
    ]


def test_the_client_names_the_run_when_a_blob_is_lost() -> None:
    h = Harness(contract_app())
    fields = PromptBook().encode([CONTRACT])
    event = located(scheduled_event(fields), 0, {next(iter(fields.blobs)): 9})
    with pytest.raises(AgentlogError, match="run r: the message stored out of line"):
        h.client._reader.inputs("r", [event])


def test_a_copied_pointer_is_read_from_the_partition_it_names() -> None:
    # A reset or fork copies the original's records into a run that may live in another partition.
    log = MemoryLog(Settings(partitions=3))
    topic = SETTINGS.payloads_topic
    log.append(topic, 0, b"other", b"an unrelated payload").result()
    fields = PromptBook().encode([CONTRACT])
    sha = next(iter(fields.blobs))
    offset = log.append(topic, 2, b"original", canonical(CONTRACT)).result()
    copied = located(scheduled_event(fields), 2, {sha: offset})
    assert read_blobs(log, topic, [copied]) == {sha: canonical(CONTRACT).decode()}
