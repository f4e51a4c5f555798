"""The audit record answers "why": a real worker on Kafka, the sink into chDB, the real CLI.

A conversational run (three turns, each prompt the whole transcript) is recorded by a worker
subprocess; the sink copies the events topic into an embedded store; then ``agentlog audit call``
shows the exact prompt of a call (verified against its recorded args hash), ``audit cost`` prices
the reported usage from a prices file loaded with ``audit prices load``, and the ``tool_calls``
view carries the tool's arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.audit_apps import API_KEY, CARD, SYSTEM, answer
from support.sink import (
    SinkProcess,
    agentlog,
    kafka_offsets,
    make_deployment,
    query,
    read_partition,
    wait_for_rows,
)
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

PRICES = """model,from_date,input_per_million,output_per_million,cached_per_million
fake-chat-1,2020-01-01,2.00,8.00,0.50
"""


@dataclass
class Recorded:
    settings: Settings
    dsn: str
    run_id: str
    payment_id: str
    fork_id: str


def transcript_at(turn: int, order: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for t in range(1, turn + 1):
        messages.append({"role": "user", "content": f"turn {t}: where is my refund for {order}?"})
        if t < turn:
            messages.append({"role": "assistant", "content": answer(t)})
    return messages


@pytest.fixture(scope="module")
def recorded(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    settings = make_deployment(services, partitions=2)
    tmp = tmp_path_factory.mktemp("audit-record")
    worker = WorkerProcess(settings, "support.audit_apps:app", "w1", tmp / "worker.log")
    try:
        worker.wait_ready(2)
        with Client(settings) as client:
            run_id = client.submit("conversation", {"order": "48211"}).run_id
            payment_id = client.submit("payment", {"order": "48211"}).run_id
            assert client.run(run_id).result(timeout=60)["turns"] == 3
            assert client.run(payment_id).result(timeout=60) == {"charged": 4160, "last4": "1111"}
            # A fork of the payment from its charge: the original is left alone, the charge skipped.
            fork_id = client.run(payment_id).fork(2, {"prompt_version": "v2"}).run_id
            assert client.run(fork_id).result(timeout=60) == {"skipped": "fork"}
            assert client.run(payment_id).status().status == "completed"
    finally:
        worker.stop()
    dsn = f"chdb://{tmp}/store"
    prices = tmp / "prices.csv"
    prices.write_text(PRICES)
    loaded = agentlog(settings, "audit", "prices", "load", str(prices), "--dsn", dsn, "--json")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["loaded"] == 1
    sink = SinkProcess(settings, dsn, tmp / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
    finally:
        assert sink.stop() == 0, sink.log_tail()
    yield Recorded(settings, dsn, run_id, payment_id, fork_id)


def audit_json(recorded: Recorded, *args: str) -> object:
    done = agentlog(recorded.settings, "audit", *args, "--dsn", recorded.dsn, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def test_audit_call_shows_the_exact_prompt_verified_by_its_hash(recorded: Recorded) -> None:
    # Positions: model 1, tool 2, model 3, tool 4, model 5, tool 6.
    found = audit_json(recorded, "call", recorded.run_id, "5")
    assert isinstance(found, dict)
    assert found["kind"] == "model" and found["model"] == "chat" and found["prompt_version"] == "refund-v3"
    assert found["messages"] == transcript_at(3, "48211")
    assert found["params"] == {"temperature": 0}
    assert found["verified"] is True
    assert found["result"]["content"] == answer(3)
    assert (found["input_tokens"], found["output_tokens"], found["cached_tokens"]) == (600, 20, 300)
    assert found["response_model"] == "fake-chat-1"
    # six messages: 600 input tokens, half cached: (600 - 300) * 2e-6 + 300 * 0.5e-6 + 20 * 8e-6
    assert found["cost_usd"] == pytest.approx(0.00091)

    text = agentlog(recorded.settings, "audit", "call", recorded.run_id, "5", "--dsn", recorded.dsn)
    assert text.returncode == 0, text.stderr
    assert f"[1] system: {SYSTEM}" in text.stdout
    assert "[6] user: turn 3: where is my refund for 48211?" in text.stdout


def test_a_tool_calls_arguments_are_in_the_store(recorded: Recorded) -> None:
    found = audit_json(recorded, "call", recorded.run_id, "4")
    assert isinstance(found, dict)
    assert found["kind"] == "tool" and found["tool"] == "lookup_order"
    assert found["args"] == {"order": "48211", "fields": ["status", "turn-2"]}
    rows = query(
        recorded.dsn,
        "SELECT position, args FROM agentlog.tool_calls WHERE run_id = {r:String} ORDER BY position",
        {"r": recorded.run_id},
    ).rows
    assert [(p, json.loads(a)["fields"][1]) for p, a in rows] == [(2, "turn-1"), (4, "turn-2"), (6, "turn-3")]


def test_each_message_is_stored_once_and_every_prompt_is_rebuilt(recorded: Recorded) -> None:
    stored = query(
        recorded.dsn,
        "SELECT arrayJoin(new_messages) FROM agentlog.events WHERE run_id = {r:String} AND fenced = 0",
        {"r": recorded.run_id},
    ).rows
    assert sorted(m for (m,) in stored) == sorted(
        [SYSTEM, *[f"turn {t}: where is my refund for 48211?" for t in (1, 2, 3)], answer(1), answer(2)]
    )
    rows = query(
        recorded.dsn,
        "SELECT position, messages FROM agentlog.model_calls WHERE run_id = {r:String} ORDER BY position",
        {"r": recorded.run_id},
    ).rows
    assert [(p, json.loads(m)) for p, m in rows] == [
        (1, transcript_at(1, "48211")),
        (3, transcript_at(2, "48211")),
        (5, transcript_at(3, "48211")),
    ]


def test_audit_cost_prices_the_reported_usage_by_model(recorded: Recorded, tmp_path: Path) -> None:
    rows = audit_json(recorded, "cost", "--by", "model")
    assert isinstance(rows, list)
    (row,) = rows
    # Tokens: the conversation's 200 + 400 + 600 and the payment's 100 (half cached), output 4 x 20.
    assert (row["model"], row["calls"], row["input_tokens"], row["output_tokens"], row["cached_tokens"]) == (
        "fake-chat-1",
        4,
        1300,
        80,
        650,
    )
    assert row["cost_usd"] == pytest.approx(650 * 2e-6 + 650 * 0.5e-6 + 80 * 8e-6)
    assert row["unpriced_calls"] == 0
    assert audit_json(recorded, "cost", "--by", "model", "--since", "1h") == rows
    assert audit_json(recorded, "cost", "--by", "model", "--since", "2999-01-01") == []
    by_version = audit_json(recorded, "cost", "--by", "prompt_version")
    assert isinstance(by_version, list)
    assert [r["prompt_version"] for r in by_version] == ["refund-v3", ""]  # the payment declared none

    # A corrected prices file re-prices history: cost is computed at query time.
    doubled = tmp_path / "prices.csv"
    doubled.write_text(PRICES.replace("2.00,8.00,0.50", "4.00,16.00,1.00"))
    assert (
        agentlog(recorded.settings, "audit", "prices", "load", str(doubled), "--dsn", recorded.dsn).returncode
        == 0
    )
    by_run = audit_json(recorded, "cost", "--by", "run")
    assert isinstance(by_run, list)
    again = {r["run"]: r["cost_usd"] for r in by_run}
    assert again[recorded.run_id] == pytest.approx(2 * (600 * 2e-6 + 600 * 0.5e-6 + 60 * 8e-6))


def test_a_malformed_prices_file_is_refused_naming_the_row(recorded: Recorded, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(PRICES + "fake-chat-2,2021-01-01,cheap,1,1\n")
    done = agentlog(recorded.settings, "audit", "prices", "load", str(bad), "--dsn", recorded.dsn)
    assert done.returncode != 0
    assert "row 3: input 'cheap' is not a number" in done.stderr


def test_secrets_reach_neither_the_log_nor_the_store(recorded: Recorded) -> None:
    settings = recorded.settings
    raw = b"".join(
        (m.key() or b"") + (m.value() or b"")
        for topic in (settings.events_topic, settings.commands_topic, settings.payloads_topic)
        for p in range(settings.partitions)
        for m in read_partition(settings, p, topic)
    )
    assert b"charge_card" in raw and b"[redacted sha256:" in raw  # the payment run is in the log
    assert CARD.encode() not in raw and API_KEY.encode() not in raw
    rows = query(recorded.dsn, "SELECT * FROM agentlog.events").rows
    dumped = json.dumps(rows)
    assert recorded.payment_id in dumped and "[redacted sha256:" in dumped
    assert CARD not in dumped and API_KEY not in dumped
    found = audit_json(recorded, "call", recorded.payment_id, "2")
    assert isinstance(found, dict)
    assert found["args"]["cents"] == 4160 and found["args"]["card"].startswith("[redacted sha256:")
    assert found["result"] == {"charged": 4160, "last4": "1111"}


def test_a_fork_skips_the_effect_and_leaves_the_original_alone(recorded: Recorded) -> None:
    original = audit_json(recorded, "call", recorded.payment_id, "2")
    forked = audit_json(recorded, "call", recorded.fork_id, "2")
    assert isinstance(original, dict) and isinstance(forked, dict)
    assert original["result"] == {"charged": 4160, "last4": "1111"}
    assert forked["result"] == {"skipped": "fork"}
    assert forked["args"] == original["args"]  # the same call, recorded and never made
    (row,) = query(
        recorded.dsn,
        "SELECT parent_run_id, fork_overrides FROM agentlog.events WHERE run_id = {r:String} AND type = 'RunStarted'",
        {"r": recorded.fork_id},
    ).rows
    assert list(row) == [recorded.payment_id, '{"prompt_version":"v2"}']
