"""Budgets per run on the real stack: a worker subprocess on Kafka with a price table, the real CLI,
and the sink copying the log into chDB for ``audit cost``.

The scripted model (tests/support/budget_apps.py) reports 400 tokens a call (300 in, 100 out) as
``acme-small``, priced here at 10 USD/M in and 20 USD/M out: 0.005 USD a call. Each call's
estimate before it starts is its short prompt plus its 300-token completion cap.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.log.records.events import Event, ModelCallCompleted, RunFailed, RunParked, RunStarted
from runtime.workflow.budget import BUDGET_EXCEEDED, Budget
from support.budget_apps import MODEL
from support.sink import SinkProcess, agentlog, kafka_offsets, make_deployment, wait_for_rows
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

PRICES = f"""model,from_date,input_per_million,output_per_million,cached_per_million
{MODEL},2020-01-01,10.00,20.00,5.00
"""


@dataclass
class Ran:
    settings: Settings
    dsn: str
    capped: str
    overridden: str
    parked: str
    by_cli: str
    events: dict[str, list[Event]]


@pytest.fixture(scope="module")
def ran(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    settings = make_deployment(services, partitions=2)
    tmp = tmp_path_factory.mktemp("budgets")
    prices = tmp / "prices.csv"
    prices.write_text(PRICES)
    worker = WorkerProcess(
        settings, "support.budget_apps:app", "w1", tmp / "worker.log", AGENTLOG_PRICE_TABLE=str(prices)
    )
    try:
        worker.wait_ready(2)
        with Client(settings) as client:
            capped = client.submit("loop_capped", 5).run_id  # the workflow's 1,000 tokens
            overridden = client.submit("loop_capped", 5, budget=Budget(max_tokens=2000)).run_id
            parked = client.submit("loop_parked", 5).run_id  # 2 model calls, then park
            assert client.run(overridden).result(timeout=60) == 5
            for run_id, ending in ((capped, "failed"), (parked, "parked")):
                with pytest.raises(RunError) as stopped:
                    client.run(run_id).result(timeout=60)
                assert stopped.value.status == ending, worker.log_tail()
            # The CLI's own budget: one model call, then the run fails (exit 1, the reason on stderr).
            by_cli = f"budget-cli-{uuid.uuid4().hex[:8]}"
            done = agentlog(
                settings,
                "submit",
                "loop",
                "--input",
                "3",
                "--run-id",
                by_cli,
                "--max-model-calls",
                "1",
                "--wait",
                "--timeout",
                "60",
            )
            assert done.returncode == 1, done.stdout + done.stderr
            assert "budget max_model_calls exceeded: used 1 of 1" in done.stderr
            events = {
                r: [logged.event for logged in client.run(r).events()]
                for r in (capped, overridden, parked, by_cli)
            }
    finally:
        worker.stop()
    dsn = f"chdb://{tmp}/store"
    loaded = agentlog(settings, "audit", "prices", "load", str(prices), "--dsn", dsn, "--json")
    assert loaded.returncode == 0, loaded.stderr
    sink = SinkProcess(settings, dsn, tmp / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
    finally:
        assert sink.stop() == 0, sink.log_tail()
    yield Ran(settings, dsn, capped, overridden, parked, by_cli, events)


def test_a_1000_token_budget_stops_the_run_before_the_call_that_would_exceed_it(ran: Ran) -> None:
    events = ran.events[ran.capped]
    assert sum(isinstance(e, ModelCallCompleted) for e in events) == 2  # 800 tokens; a third would pass 1,000
    failed = events[-1]
    assert isinstance(failed, RunFailed) and failed.error_type == BUDGET_EXCEEDED
    assert "budget max_tokens exceeded: used 800 of 1000" in failed.error
    assert "the model call 'chat' at step 3" in failed.error

    status = agentlog(ran.settings, "status", ran.capped, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["budget"] == {
        "budget": {"max_tokens": 1000, "on_exceeded": "fail"},
        "tokens": 800,
        "model_calls": 2,
    }
    text = agentlog(ran.settings, "status", ran.capped)
    assert "budget    used 800 tokens, 2 model calls of max_tokens 1000" in text.stdout


def test_a_submission_s_budget_overrides_the_workflow_s_default(ran: Ran) -> None:
    events = ran.events[ran.overridden]
    assert sum(isinstance(e, ModelCallCompleted) for e in events) == 5
    assert events[-1].type == "RunCompleted"
    started = events[0]
    assert isinstance(started, RunStarted) and started.budget == Budget(max_tokens=2000).to_json()


def test_a_model_calls_budget_parks_the_run_when_the_workflow_says_park(ran: Ran) -> None:
    parked = ran.events[ran.parked][-1]
    assert isinstance(parked, RunParked) and parked.position == 3
    assert "budget max_model_calls exceeded: used 2 of 2" in parked.reason


def test_audit_cost_shows_each_run_s_spend_and_its_budget(ran: Ran) -> None:
    done = agentlog(ran.settings, "audit", "cost", "--by", "run", "--dsn", ran.dsn, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["run"]: row for row in json.loads(done.stdout)}
    capped = rows[ran.capped]
    assert (capped["input_tokens"], capped["output_tokens"]) == (600, 200)
    assert capped["cost_usd"] == pytest.approx(0.01)
    assert json.loads(capped["budget"]) == {"max_tokens": 1000, "on_exceeded": "fail"}
    assert rows[ran.overridden]["cost_usd"] == pytest.approx(0.025)
    assert json.loads(rows[ran.by_cli]["budget"]) == {"max_model_calls": 1, "on_exceeded": "fail"}


def test_a_budget_that_cannot_hold_is_refused_at_submit(ran: Ran) -> None:
    done = agentlog(ran.settings, "submit", "loop", "--input", "1", "--max-tokens", "0")
    assert done.returncode == 1 and "max_tokens" in done.stderr, done.stderr


def test_a_worker_refuses_to_start_on_a_price_table_that_does_not_parse(ran: Ran, tmp_path: Path) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text(PRICES + "other,someday,1,1,1\n")
    worker = WorkerProcess(
        ran.settings, "support.budget_apps:app", "w2", tmp_path / "worker.log", AGENTLOG_PRICE_TABLE=str(bad)
    )
    try:
        code = worker.proc.wait(timeout=60)
    finally:
        worker.stop()
    assert code != 0
    assert "row 3: from_date 'someday'" in worker.log_path.read_text()


def test_the_ui_s_run_page_shows_the_budget(ran: Ran) -> None:
    from analytics.store import connect
    from ui import pages

    with connect(ran.dsn) as store:
        capped = pages.run_page(store, ran.settings, ran.capped)
        unbounded = pages.run_page(store, ran.settings, ran.overridden)
    assert '<dd id="budget">max tokens 1000 · on exceeded: fail</dd>' in capped
    assert '<dd id="budget">max tokens 2000 · on exceeded: fail</dd>' in unbounded
