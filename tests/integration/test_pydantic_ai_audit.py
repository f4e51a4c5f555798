"""A PydanticAI run in the audit store like any run: a worker on Kafka runs the refund agent of
``examples.refund_pydantic_ai`` (5 steps: 6 model requests), the sink copies the log into chDB,
and ``agentlog audit call`` / ``audit cost`` show its prompts, tokens and cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.explore import call_usage
from analytics.store import connect
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import ModelCallScheduled
from runtime.log.records.prompts import checked_args
from support.sink import SinkProcess, agentlog, kafka_offsets, make_deployment, wait_for_rows
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration


def audit_json(settings: Settings, dsn: str, *args: str) -> object:
    done = agentlog(settings, "audit", *args, "--dsn", dsn, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def test_a_pydantic_ai_runs_prompts_tokens_and_cost_are_in_the_audit_store(
    services: Settings, tmp_path: Path
) -> None:
    settings = make_deployment(services, partitions=1)
    worker = WorkerProcess(
        settings,
        "examples.refund_pydantic_ai:app",
        "w1",
        tmp_path / "worker.log",
        REFUND_WORLD_DB=str(tmp_path / "world.db"),
    )
    try:
        worker.wait_ready(1)
        with Client(settings) as client:
            run_id = client.submit("refund", {"order": "48211", "steps": 5}).run_id
            result = client.run(run_id).result(timeout=60)
            scheduled = [
                e.event for e in client.run(run_id).events() if isinstance(e.event, ModelCallScheduled)
            ]
            prompts = client.run(run_id).prompts()
    finally:
        worker.stop()
    assert result["requests"] == 6
    # The tool definitions are stored once, in the run's first request; the later ones refer to
    # them, and each request's whole input reads back from the records and matches its args hash.
    holding = [e.position for e in scheduled if any('"name":"create_ticket"' in m for m in e.new_messages)]
    assert holding == [1]
    assert all('"create_ticket"' not in (e.params or "") for e in scheduled)
    assert len(prompts) == 6
    for recorded in prompts.values():
        tools = checked_args(recorded)["params"]["parameters"]["function_tools"]
        assert [t["name"] for t in tools] == ["lookup", "send_email", "refund", "create_ticket"]
    dsn = f"chdb://{tmp_path}/store"
    sink = SinkProcess(settings, dsn, tmp_path / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
    finally:
        assert sink.stop() == 0, sink.log_tail()

    # Positions: model 1, tool 2, model 3, ... model 11 (the answer).
    last = audit_json(settings, dsn, "call", run_id, "11")
    assert isinstance(last, dict)
    assert last["kind"] == "model" and last["model"] == "refund.model" and last["verified"] is True
    requests = [m for m in last["messages"] if m.get("kind") == "request"]
    assert requests[0]["instructions"] == "Refund the order step by step; one tool per step."
    assert requests[0]["parts"][0]["content"] == "order 48211, 5 steps"
    assert len(last["messages"]) == 11  # the whole conversation the agent sent
    # ... with the responses it sent back (stored once, as the results of the calls before) and the
    # tool definitions, which its record refers to by address.
    responses = [m for m in last["messages"] if m.get("kind") == "response"]
    assert [r["parts"][0]["args"]["step"] for r in responses] == [1, 2, 3, 4, 5]
    assert all(r["run_id"] == responses[0]["run_id"] for r in responses) and responses[0]["run_id"]
    tools = last["params"]["parameters"]["function_tools"]
    assert [t["name"] for t in tools] == ["lookup", "send_email", "refund", "create_ticket"]
    assert tools[2]["parameters_json_schema"]["required"] == ["order", "amount", "reason"]
    assert last["result"]["response"]["parts"][0]["content"] == "order 48211: 5 steps done"
    # recorded short, shown whole: the model name and counts the record's fields hold are put back
    assert last["result"]["response"]["model_name"] == last["response_model"]
    assert last["result"]["response"]["usage"]["input_tokens"] == last["input_tokens"]
    assert last["input_tokens"] > 0 and last["output_tokens"] > 0
    model = last["response_model"]
    assert isinstance(model, str) and model

    tool = audit_json(settings, dsn, "call", run_id, "2")
    assert isinstance(tool, dict)
    assert tool["kind"] == "tool" and tool["tool"] == "refund.lookup"
    assert tool["args"] == {"order": "48211", "step": 1}  # the unit's name is not recorded

    prices = tmp_path / "prices.csv"
    prices.write_text(
        f"model,from_date,input_per_million,output_per_million,cached_per_million\n{model},2020-01-01,2,8,0.5\n"
    )
    assert agentlog(settings, "audit", "prices", "load", str(prices), "--dsn", dsn).returncode == 0
    (row,) = audit_json(settings, dsn, "cost", "--by", "model")  # type: ignore[misc]
    assert row["model"] == model and row["calls"] == 6 and row["unpriced_calls"] == 0
    assert row["input_tokens"] == result["input_tokens"] and row["output_tokens"] == result["output_tokens"]
    assert row["cost_usd"] == pytest.approx(row["input_tokens"] * 2e-6 + row["output_tokens"] * 8e-6)

    # The UI's run page reads each call's prompt through the same rebuild.
    with connect(dsn) as store:
        shown = call_usage(store, run_id)
    params = json.loads(str(shown[11]["params"]))
    assert [t["name"] for t in params["parameters"]["function_tools"]][-1] == "create_ticket"
    assert len(json.loads(str(shown[11]["messages"]))) == 11
