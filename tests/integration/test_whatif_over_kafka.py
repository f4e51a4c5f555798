"""agentlog whatif over Kafka: a real worker process records 12 refund runs, the real CLI replays them
under a stricter planner prompt and under new code that adds an effect, the sink copies it all into
the audit store. The report names exactly the runs whose decisions change, the world (a SQLite file
of effects) is untouched, and the store lists the what-if runs only when asked.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from analytics import audit, calls
from analytics import prices as store_prices
from analytics.store import connect
from runtime.cli.main import main as cli_main
from runtime.cli.whatif import print_report
from runtime.client import Client
from runtime.config import Settings
from runtime.pricing import PriceTable, read_prices
from runtime.whatif import session
from runtime.whatif.change import parse_change
from runtime.whatif.report import Report
from runtime.whatif.selection import Selection
from support.sink import InProcessSink, agentlog, kafka_offsets, make_deployment, wait_for_rows
from support.whatif_apps import STRICT, SYSTEM, app, app_v2, effects
from support.workers import WorkerProcess
from ui import pages

pytestmark = pytest.mark.integration

AMOUNTS = [40, 150, 60, 20, 300, 75, 90, 120, 10, 55, 80, 35]  # 150, 300 and 120 are over 100
PRICES = """model,from_date,input_per_million,output_per_million,cached_per_million
fake-planner-1,2020-01-01,2.00,8.00,1.00
fake-writer-1,2020-01-01,1.00,4.00,0.50
"""
V2 = "support.whatif_apps:app_v2"
SLOW_WINDOW = 3


@dataclass
class Done:
    settings: Settings
    dsn: str
    runs: list[str]
    world_before: list[tuple[str, str, str]]
    world_after: list[tuple[str, str, str]]
    prompt: dict[str, Any]  # the prompt change's report (agentlog whatif --json)
    code: Report  # the code change's report
    table: str  # the prompt change's report as the terminal shows it, read back from the log
    slow: Report  # a model change to a slow model under a one-call-at-a-time limit
    production: list[str]  # runs submitted while that what-if ran


def _whatif(settings: Settings, *args: str) -> dict[str, Any]:
    done = agentlog(settings, "whatif", *args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture(scope="module")
def done(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Done]:
    settings = make_deployment(services, partitions=2)
    tmp = tmp_path_factory.mktemp("whatif")
    world = str(tmp / "world.db")
    prices = tmp / "prices.csv"
    prices.write_text(PRICES)
    worker = WorkerProcess(
        settings,
        "support.whatif_apps:app",
        "w1",
        tmp / "worker.log",
        "--whatif-app",
        V2,
        WHATIF_WORLD_DB=world,
    )
    try:
        worker.wait_ready(2)
        with Client(settings) as client:
            runs = [
                client.submit("refund", {"order": f"o{i}", "amount": a}).run_id for i, a in enumerate(AMOUNTS)
            ]
            client.results(runs, timeout=60)
        before = effects(world)
        prompt = _whatif(
            settings, "--workflow", "refund", "--prompt", f"planner={STRICT}", "--prices", str(prices)
        )
        with Client(settings) as client:  # the rest through the API (a CLI process costs seconds)
            code = session.start(
                client,
                session.prepare(client, Selection(run_ids=tuple(runs[:2])), parse_change([], [], V2), app_v2),
                session.Options(),
            )
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown):
                print_report(session.report(client, prompt["whatif"], PriceTable(read_prices(prices))))
            after = effects(world)  # before production runs make effects of their own
            production: list[str] = []

            def submit_production(fork: str) -> None:  # once the what-if's first fork has ended
                if not production:
                    production.extend(
                        client.submit("refund", {"order": f"p{i}", "amount": 30}).run_id for i in range(3)
                    )

            slow = session.start(
                client,
                session.prepare(
                    client,
                    Selection(run_ids=tuple(runs)),
                    parse_change([], ["planner=planner-slow"], None),
                    app,
                ),
                session.Options(window=SLOW_WINDOW, progress=submit_production),
            )
            client.results(production, timeout=60)
    except BaseException:
        print(worker.log_tail())
        raise
    finally:
        worker.stop()
    dsn = f"chdb://{tmp}/store"
    store_prices.load(dsn, read_prices(prices))
    with InProcessSink(settings, dsn):
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total)
    yield Done(settings, dsn, runs, before, after, prompt, code, shown.getvalue(), slow, production)


def test_a_prompt_change_names_exactly_the_runs_whose_decisions_change(done: Done) -> None:
    report = done.prompt
    over = {done.runs[i] for i, a in enumerate(AMOUNTS) if a > 100}
    changed = [row for row in report["rows"] if row["state"] == "changed"]
    assert {row["origin"] for row in changed} == over
    for row in changed:
        assert row["first_difference"]["original"].startswith('refund({"amount": ')
        assert row["first_difference"]["whatif"].startswith('create_ticket({"order": ')
        assert [c["tool"] for c in row["whatif"]["would_have_called"]] == ["create_ticket"]
    assert report["summary"] == (
        f"3 of 12 runs changed; create_ticket: 3 more; refund: 3 of 12 no longer made; "
        f"cost {report['cost_usd']['delta']:+.6f} USD"
    )
    # The priced difference of the calls made: each planner prompt is priced by its system text.
    assert report["cost_usd"]["delta"] == pytest.approx(12 * (len(STRICT) - len(SYSTEM)) * 2e-6)
    assert done.world_after == done.world_before  # the world untouched by both what-ifs
    assert "refund: 3 of 12 no longer made" in done.table
    assert f"what-if   {report['whatif']}" in done.table


def test_new_code_that_adds_an_effect_records_it_as_would_have_called(done: Done) -> None:
    rows = done.code.rows
    assert [row.state for row in rows] == ["changed", "changed"]
    for row in rows:
        assert row.whatif is not None and row.first_difference is not None
        assert [c.tool for c in row.whatif.would_have_called] == ["refund", "send_email"]
        assert row.first_difference["whatif"].startswith('send_email({"order": ')
    assert not any(kind == "send_email" for _, kind, _ in done.world_after)


def test_the_store_lists_whatif_runs_only_when_asked_and_beside_their_originals(done: Done) -> None:
    whatif_id = done.prompt["whatif"]
    over = {done.runs[i] for i, a in enumerate(AMOUNTS) if a > 100}
    with connect(done.dsn) as store:
        listed = audit.runs(store, limit=100).rows
        mine = audit.runs(store, limit=100, whatif=whatif_id).rows
        every = audit.runs(store, limit=100, whatif="*").rows
        beside = audit.whatif_runs(store, whatif_id).rows
        page = pages.whatif_page(store, whatif_id)
    assert {r["run_id"] for r in listed} == {*done.runs, *done.production}  # production runs only
    assert len(mine) == 12 and {r["whatif"] for r in mine} == {whatif_id}
    assert len(every) == 12 + 3 + 12 + 2 + 12  # with the what-if runs of the three what-ifs
    assert {r["origin_run_id"] for r in beside if r["changed"]} == over
    delta = sum(float(str(r["cost_usd"])) - float(str(r["origin_cost_usd"])) for r in beside)
    assert delta == pytest.approx(done.prompt["cost_usd"]["delta"])
    assert page.count('class="changed"') == 3
    assert f"/diff?a={beside[0]['origin_run_id']}&amp;b={beside[0]['run_id']}" in page


def test_production_runs_submitted_during_a_whatif_are_not_starved(done: Done) -> None:
    """A what-if of the 12 runs under ``--model planner=planner-slow``: every planner call (the
    what-if's and production's) holds the one permit of the ``planners`` limit (concurrent 1) for
    SLOW_CALL_S, so the what-if's 12 slow calls take the permit in turn. Three production runs are
    submitted once its first fork has ended. What protects them is the window: the what-if holds at
    most SLOW_WINDOW runs in the workers, so a production call waits for the permit behind at most
    that many what-if calls (permits are granted in the order asked), not behind every fork still
    to run. Each production run therefore ends before the what-if's last fork does; without the
    window (every fork started at once) they would wait behind the whole what-if."""
    assert len(done.slow.rows) == 12 and all(row.whatif is not None for row in done.slow.rows)
    with connect(done.dsn) as store:
        forks = audit.runs(store, limit=100, whatif=done.slow.whatif_id).rows
        production = [r for r in audit.runs(store, limit=100).rows if r["run_id"] in done.production]
    assert len(forks) == 12 and len(production) == 3
    assert {r["status"] for r in production} == {"completed"}
    last_fork = max(str(r["ended_at"]) for r in forks)
    assert all(str(r["ended_at"]) < last_fork for r in production), (
        production,
        sorted(str(r["ended_at"]) for r in forks),
    )


def test_the_other_audit_views_leave_whatif_runs_out_unless_asked(
    done: Done, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit tools``, divergences, history size and ``audit cost`` are about production: a what-if
    fork copies its original's tool calls (the same idempotency keys) and records its effects dry, so
    counting it would show duplicates and spend that production never made."""
    ids = [done.prompt["whatif"], done.code.whatif_id, done.slow.whatif_id]
    with connect(done.dsn) as store:
        forks = {str(r["run_id"]) for r in audit.runs(store, limit=100, whatif="*").rows if r["whatif"]}
        tools = audit.tool_attempts(store, limit=1000).rows
        every_tool = audit.tool_attempts(store, limit=1000, whatif="*").rows
        diverged = audit.divergences(store, limit=1000).rows
        sizes = audit.history_size(store, done.settings, top=100).rows
        cost = calls.cost(store, "run").rows
        cost_of = {w: calls.cost(store, "run", whatif=w).rows for w in ids}
        every_cost = calls.cost(store, "run", whatif="*").rows
        spend = calls.whatif_spend(store)
    assert len(forks) == 12 + 2 + 12
    production = {*done.runs, *done.production}
    assert {run for r in tools for run in r["runs"]} == production  # type: ignore[union-attr]
    assert not any(r["duplicate"] for r in tools)
    assert {run for r in every_tool for run in r["runs"]} == production | forks  # type: ignore[union-attr]
    assert any(r["duplicate"] for r in every_tool)  # a fork's copied calls share its original's keys
    assert not forks & {str(r["run_id"]) for r in diverged}
    assert {str(r["run_id"]) for r in sizes} == production
    assert {str(r["run"]) for r in cost} == production
    assert [len(cost_of[w]) for w in ids] == [12, 2, 12]
    assert {str(r["run"]) for r in every_cost} == production | forks
    # The calls the what-ifs made anew: the two calls of every fork, none copied from an original.
    whatif_usd = sum(float(str(r["cost_usd"])) for rows in cost_of.values() for r in rows)
    assert spend == (12 * 2 + 2 * 2 + 12 * 2, pytest.approx(whatif_usd))
    assert spend[1] > 0
    assert cli_main(["audit", "cost", "--dsn", done.dsn]) == 0
    shown = capsys.readouterr().out
    assert f"what-if calls left out: 52 calls, {spend[1]:.6f} USD (--whatif to include them)" in shown
