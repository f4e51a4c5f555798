"""Budgets per run: the arithmetic, the price matching, the worker's price table, and runs stopped by
their budget on the in-memory log (the same worker as in production)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from pathlib import Path

import pytest

from runtime.config import Settings
from runtime.log.records.events import (
    ModelCallCompleted,
    ModelCallScheduled,
    RunFailed,
    RunParked,
    RunStarted,
)
from runtime.pricing import PriceFileError, PriceTable, read_prices
from runtime.worker.budgets import RECHECK_SECONDS, PriceBook, binding_budget
from runtime.workflow.activation import Wake
from runtime.workflow.budget import BUDGET_EXCEEDED, Budget, BudgetError, CallSpend, Spend, check
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Stamp
from support import budget_apps
from support.memory_harness import Harness

pytestmark = pytest.mark.unit

HEADER = "model,from_date,input_per_million,output_per_million,cached_per_million\n"
UTC = dt.UTC


# ----------------------------------------------------------------------------- declaring a budget
@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_cost": -1.0}, "max_cost"),
        ({"max_cost": math.nan}, "max_cost"),
        ({"max_cost": math.inf}, "max_cost"),
        ({"max_model_calls": -3}, "max_model_calls"),
        ({"max_tokens": 10.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 10, "on_exceeded": "explode"}, "on_exceeded"),
        ({}, "at least one"),
    ],
)
def test_a_budget_that_cannot_hold_is_refused_naming_the_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(BudgetError, match=named):
        Budget(**fields)  # type: ignore[arg-type]


def test_a_budget_is_recorded_as_json_and_read_back() -> None:
    budget = Budget(max_cost=2.0, max_model_calls=5, on_exceeded="park")
    assert json.loads(budget.to_json()) == {"max_cost": 2.0, "max_model_calls": 5, "on_exceeded": "park"}
    assert Budget.from_json(budget.to_json()) == budget
    with pytest.raises(BudgetError, match="max_dollars"):
        Budget.from_json('{"max_dollars": 3}')


def test_the_submission_s_budget_binds_the_run_else_the_workflow_s() -> None:
    default = Budget(max_tokens=1000)
    assert binding_budget(None, default) == (default.to_json(), None)
    assert binding_budget(None, None) == (None, None)
    override = Budget(max_tokens=5000).to_json()
    assert binding_budget(override, default) == (override, None)
    recorded, problem = binding_budget('{"max_tokens": -1}', default)
    assert recorded is None and problem is not None and "max_tokens" in problem


# ----------------------------------------------------------------------------- the arithmetic
def _spend(budget: Budget, *tokens: tuple[int, int]) -> Spend:
    spend = Spend(budget)
    for at, (tokens_in, tokens_out) in enumerate(tokens):
        spend.add(CallSpend(("m",), at, tokens_in, tokens_out, 0))
    return spend


def test_a_call_that_would_land_past_the_limit_does_not_start_one_that_lands_on_it_does() -> None:
    budget = Budget(max_tokens=1000)
    spend = _spend(budget, (300, 100), (300, 100))
    assert spend.tokens == 800 and spend.model_calls == 2
    assert check(budget, spend, 0.0, 200, 0.0, 3, "chat") is None  # exactly 1000
    exceeded = check(budget, spend, 0.0, 201, 0.0, 3, "chat")
    assert exceeded is not None
    assert (exceeded.budget, exceeded.used, exceeded.estimate, exceeded.limit, exceeded.position) == (
        "max_tokens",
        800.0,
        201.0,
        1000.0,
        3,
    )
    assert "max_tokens" in exceeded.reason() and "used 800 of 1000" in exceeded.reason()
    assert "step 3" in exceeded.reason()


def test_calls_and_cost_are_counted_against_their_own_limits() -> None:
    calls = Budget(max_model_calls=2)
    assert check(calls, _spend(calls, (1, 1)), 0.0, 10**6, 0.0, 2, "chat") is None
    stopped = check(calls, _spend(calls, (1, 1), (1, 1)), 0.0, 1, 0.0, 3, "chat")
    assert stopped is not None and stopped.budget == "max_model_calls" and stopped.used == 2
    cost = Budget(max_cost=0.01)
    assert check(cost, _spend(cost), 0.009, 1, 0.001, 1, "chat") is None
    over = check(cost, _spend(cost), 0.009, 1, 0.0011, 1, "chat")
    assert over is not None and over.budget == "max_cost" and "0.0090 USD" in over.reason()


# ----------------------------------------------------------------------------- price matching
def _table(tmp_path: Path, rows: str) -> PriceTable:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + rows)
    return PriceTable(read_prices(path))


def test_a_call_is_priced_by_its_reported_model_then_its_model_param_then_its_registered_name(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, "reported,2020-01-01,1,1,1\nparam,2020-01-01,2,2,2\nchat,2020-01-01,3,3,3\n")
    at = dt.datetime(2025, 1, 1, tzinfo=UTC)
    for names, model, index in [
        (("reported", "param", "chat"), "reported", 0),
        ((None, "param", "chat"), "param", 1),
        (("unknown", None, "chat"), "chat", 2),
    ]:
        matched = table.price(names, at)
        assert matched is not None and (matched[0].model, matched[1]) == (model, index)
    assert table.price(("unknown", None, "other"), at) is None


def test_a_price_holds_from_its_date_until_the_same_model_s_next_row(tmp_path: Path) -> None:
    table = _table(tmp_path, "m,2024-06-01,4.00,8.00,1.00\nm,2024-01-01,2.00,4.00,0.50\n")
    assert table.price(("m",), dt.datetime(2023, 12, 31, tzinfo=UTC)) is None
    early = table.price(("m",), dt.datetime(2024, 3, 1, tzinfo=UTC))
    late = table.price(("m",), dt.datetime(2024, 6, 1, tzinfo=UTC))
    assert early is not None and early[0].input_per_token == pytest.approx(2e-6)
    assert late is not None and late[0].input_per_token == pytest.approx(4e-6)
    at_ms = int(dt.datetime(2024, 3, 1, tzinfo=UTC).timestamp() * 1000)
    # as the audit store prices it: (input - cached) at input, cached at cached, output at output
    assert table.cost(("m",), at_ms, 600, 20, 300) == pytest.approx(300 * 2e-6 + 300 * 0.5e-6 + 20 * 4e-6)


def test_a_prices_file_that_does_not_parse_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + "m,2024-01-01,2,4,1\nm,2024-02-01,free,4,1\n")
    with pytest.raises(PriceFileError, match="row 3: input 'free' is not a number"):
        read_prices(path)


def test_the_worker_s_price_table_refuses_a_bad_start_and_keeps_the_old_table_on_a_bad_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + "m,2024-01-01,nope,4,1\n")
    with pytest.raises(PriceFileError, match="row 2"):
        PriceBook(path)
    path.write_text(HEADER + "m,2024-01-01,2,4,1\n")
    book = PriceBook(path)
    now = [1000.0]
    monkeypatch.setattr("runtime.worker.budgets.time.monotonic", lambda: now[0])
    first = book.table()
    assert first is not None and len(first) == 1

    def change(text: str) -> None:
        stat = path.stat()
        path.write_text(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a later mtime, surely
        now[0] += RECHECK_SECONDS

    change(HEADER + "m,2024-01-01,2,4,1\nm,2024-02-01,broken,4,1\n")
    with caplog.at_level(logging.ERROR, logger="agentlog.worker"):
        assert book.table() is first
    refused = [json.loads(r.getMessage()) for r in caplog.records if "price_table_refused" in r.getMessage()]
    assert refused and "row 3" in refused[0]["error"]
    change(HEADER + "m,2024-01-01,2,4,1\nn,2024-01-01,1,1,1\n")
    second = book.table()
    assert second is not first and second is not None and len(second) == 2


# ----------------------------------------------------------------------------- runs on the in-memory log
async def test_a_run_stops_before_the_call_that_would_exceed_its_token_budget() -> None:
    h = Harness(budget_apps.app)
    h.start()
    try:
        run_id = h.client.submit("loop_capped", 5).run_id
        status = await h.ended(run_id)
        events = h.events(run_id)
    finally:
        await h.stop_all()
    assert status.status == "failed"
    # Two calls of 400 tokens ran; the third (800 used + its estimate > 1,000) did not start.
    assert sum(isinstance(e, ModelCallCompleted) for e in events) == 2
    assert [e.position for e in events if isinstance(e, ModelCallScheduled)] == [1, 2, 3]
    failed = events[-1]
    assert isinstance(failed, RunFailed) and failed.error_type == BUDGET_EXCEEDED
    assert "budget max_tokens exceeded: used 800 of 1000" in failed.error and "step 3" in failed.error
    started = events[0]
    assert isinstance(started, RunStarted) and started.budget == Budget(max_tokens=1000).to_json()
    assert status.budget is not None and (status.budget.tokens, status.budget.model_calls) == (800, 2)
    assert status.budget.budget == {"max_tokens": 1000, "on_exceeded": "fail"}

    # Replayed, the run is what it recorded: nothing re-decided, nothing appended.
    machine = new_run(budget_apps.app, started, Stamp(lambda: 0, "replay", 0))
    replayed = machine.activate(Wake(events))
    assert replayed.records == [] and replayed.intents == [] and replayed.view.status == "failed"


async def test_a_submission_s_budget_overrides_the_workflow_s() -> None:
    h = Harness(budget_apps.app)
    h.start()
    try:
        run = h.client.submit("loop_capped", 5, budget=Budget(max_tokens=2000))
        assert (await h.ended(run.run_id)).status == "completed"
        assert run.result(timeout=5) == 5
        unbounded = h.client.submit("loop", 5, budget=Budget(max_tokens=500)).run_id
        status = await h.ended(unbounded)
    finally:
        await h.stop_all()
    assert status.status == "failed" and status.reason is not None and "step 2" in status.reason


async def test_a_model_calls_budget_parks_the_run_when_the_workflow_says_park() -> None:
    h = Harness(budget_apps.app)
    h.start()
    try:
        run_id = h.client.submit("loop_parked", 5).run_id
        status = await h.ended(run_id)
        events = h.events(run_id)
    finally:
        await h.stop_all()
    assert status.status == "parked"
    parked = events[-1]
    assert isinstance(parked, RunParked) and parked.position == 3
    assert "budget max_model_calls exceeded: used 2 of 2" in parked.reason and "step 3" in parked.reason


async def test_a_cost_budget_is_priced_from_the_worker_s_price_table(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    # acme-small, as the model reports itself: 300 in at 10/M + 100 out at 20/M = 0.005 USD a call
    prices.write_text(HEADER + f"{budget_apps.MODEL},2020-01-01,10.00,20.00,5.00\n")
    h = Harness(budget_apps.app, settings=Settings(partitions=1, price_table=prices))
    h.start()
    try:
        run_id = h.client.submit("loop", 5, budget=Budget(max_cost=0.012)).run_id
        status = await h.ended(run_id)
    finally:
        await h.stop_all()
    # 2 calls: 0.010 USD; the third is estimated at its cap's 300 output tokens (0.006): past 0.012.
    assert status.status == "failed" and status.reason is not None
    assert "budget max_cost exceeded: used 0.0100 USD of 0.0120 USD" in status.reason
    assert "step 3" in status.reason


def test_a_worker_does_not_start_on_a_price_table_that_does_not_parse(tmp_path: Path) -> None:
    from runtime.log.port.memory import MemoryLog
    from runtime.log.schemas.serde import Serde
    from runtime.worker.loop import Worker

    prices = tmp_path / "prices.csv"
    prices.write_text(HEADER + "m,someday,1,1,1\n")
    settings = Settings(partitions=1, price_table=prices)
    with pytest.raises(PriceFileError, match="row 2: from_date 'someday'"):
        Worker(
            budget_apps.app, settings, log=MemoryLog(settings), serde=Serde.offline(settings), worker_id="w"
        )
