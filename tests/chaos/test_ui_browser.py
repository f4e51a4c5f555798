"""``agentlog ui`` in a real browser (Debian's Chromium driven by playwright) over a store filled by
real runs: refund-40 whose worker is SIGKILLed at step 31, and a reset of it that decides
differently from step 21 (tests/support/ui_store.py). The sink keeps running, so the UI reads the
embedded store through the sink's query port, as it does next to a live sink.

Screenshots and the measured page load times go to ``build/ui-screenshots`` (or
``$AGENTLOG_UI_SCREENSHOTS``); docs/ui-run.png is one of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from analytics.explore import view_columns
from analytics.store import connect
from runtime.client import Client
from runtime.config import Settings
from support.browser import chromium
from support.services import ROOT, make_deployment
from support.sink import agentlog, query
from support.ui_store import (
    CRASH_STEP,
    REFUND_APP,
    RESET_POSITION,
    FilledStore,
    UiProcess,
    fill_refund_store,
    free_port,
)
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
# A call's details are fetched from the store when clicked; beside the rest of the suite on two
# cores that query can take longer than Playwright's 5 s default for an expectation.
expect.set_options(timeout=20_000)

SHOTS = Path(os.environ.get("AGENTLOG_UI_SCREENSHOTS", ROOT / "build" / "ui-screenshots"))
WARN_EVENTS = 150  # below refund-40's 162 events: both runs count as near the history limit


@dataclass
class World:
    deployment: Settings
    store: FilledStore
    ui: UiProcess
    workers: list[WorkerProcess]
    tmp: Path
    load_times: dict[str, dict[str, float]]


@pytest.fixture(scope="module")
def world(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("ui")
    deployment = make_deployment(services)
    workers: list[WorkerProcess] = []
    store = fill_refund_store(deployment, workers, tmp)
    ui = UiProcess(
        deployment, store.dsn, tmp / "ui.log", free_port(), AGENTLOG_HISTORY_WARN_EVENTS=str(WARN_EVENTS)
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    found = World(deployment, store, ui, workers, tmp, {})
    try:
        yield found
    finally:
        ui.stop()
        store.sink.stop()
        for worker in workers:
            worker.stop()
        (SHOTS / "load-times.json").write_text(json.dumps(found.load_times, indent=2) + "\n")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    opened = context.new_page()
    yield opened
    context.close()


def load(world: World, page: Page, path: str, name: str) -> None:
    """Open ``path`` and record how long it took in the browser: the whole load (navigation start
    to the load event) and the server's part (request sent to the response's last byte)."""
    page.goto(world.ui.url + path)
    timing = page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " return [n.loadEventEnd - n.startTime, n.responseEnd - n.requestStart]; }"
    )
    world.load_times[name] = {"load_s": round(timing[0] / 1000, 3), "response_s": round(timing[1] / 1000, 3)}


def shot(page: Page, name: str, full: bool = True) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def refund_key(world: World) -> str:
    rows = query(
        world.store.dsn,
        "SELECT idempotency_key FROM agentlog.tool_calls WHERE run_id = {r:String} AND tool = 'refund'",
        {"r": world.store.crashed_run},
    ).rows
    assert len(rows) == 1, rows
    return str(rows[0][0])


def test_the_runs_page_lists_filters_and_sorts_runs(world: World, page: Page) -> None:
    load(world, page, "/", "runs")
    crashed, reset = world.store.crashed_run, world.store.reset_run
    for run in (crashed, reset):
        row = page.locator(f'tr[data-run="{run}"]')
        expect(row).to_contain_text("completed")
        expect(row.locator("td").nth(3)).to_have_text("40")  # steps
        expect(row.locator("td").nth(1)).to_have_text("refund")
    shot(page, "runs")
    # Filters: status, near the history limit (warn set to 150 events), workflow.
    page.select_option("select[name=status]", "running")
    page.click("form.filters button")
    expect(page.locator("td.empty")).to_have_text("no runs match")
    page.goto(world.ui.url + "/?near=1")
    expect(page.locator("tbody tr.near-limit")).to_have_count(2)
    page.goto(world.ui.url + "/?workflow=nope")
    expect(page.locator("td.empty")).to_be_visible()
    page.goto(world.ui.url + "/?workflow=refund&since=1h")
    expect(page.locator("tbody tr[data-run]")).to_have_count(2)
    page.goto(world.ui.url + "/?until=2000-01-01")
    expect(page.locator("td.empty")).to_be_visible()
    for column in ("steps", "cost", "events", "bytes", "ended_at"):  # steps and cost join the calls
        page.goto(world.ui.url + f"/?sort={column}")
        expect(page.locator("tbody tr[data-run]")).to_have_count(2)
    # Sorting by a column is a link: descending first, a second click ascending.
    page.goto(world.ui.url + "/")
    page.click("th a.sort >> text=run")
    low, high = sorted([crashed, reset])
    expect(page.locator("tbody tr").first).to_have_attribute("data-run", high)
    page.click("th a.sort >> text=run")
    expect(page.locator("tbody tr").first).to_have_attribute("data-run", low)
    page.click(f'a:text("{crashed}")')
    expect(page.locator("h1")).to_contain_text(crashed)


def test_the_run_page_shows_40_steps_the_in_doubt_step_and_the_worker_change(
    world: World, page: Page
) -> None:
    load(world, page, f"/run/{world.store.crashed_run}", "run")
    expect(page.locator("#steps")).to_have_text("40")
    expect(page.locator("svg.timeline .step-row")).to_have_count(40)
    # Every call is a bar: 40 planner calls and 40 tools.
    expect(page.locator("svg.timeline .call.model")).to_have_count(40)
    expect(page.locator("svg.timeline .call.tool")).to_have_count(40)
    # Step 31's planner call (position 61) was in flight when its worker died: in doubt, marked.
    in_doubt = page.locator("svg.timeline .call.in-doubt")
    expect(in_doubt).to_have_count(1)
    expect(in_doubt).to_have_attribute("data-step", str(CRASH_STEP))
    expect(in_doubt).to_have_attribute("data-call", str(2 * CRASH_STEP - 1))
    expect(page.locator("svg.timeline .in-doubt-marker")).to_contain_text("in doubt")
    expect(page.locator("#in-doubt")).to_contain_text(f"step {CRASH_STEP}")
    # Its lost first attempt, under the dead worker's epoch, is drawn too.
    expect(in_doubt.locator("rect.attempt.lost")).to_have_count(1)
    # The worker change: one vertical line at the new epoch, naming the worker that took over.
    change = page.locator("svg.timeline .epoch-change")
    expect(change).to_have_count(1)
    expect(change).to_have_attribute("data-epoch", str(world.store.second_epoch))
    expect(change).to_contain_text("worker w2")
    expect(page.locator("#epochs")).to_contain_text(
        f"{world.store.first_epoch} \u2192 {world.store.second_epoch}"
    )
    # Cost: shown when the store prices the calls; otherwise the page says why there is none.
    with connect(world.store.dsn, wait=30) as store:
        if "cost_usd" in view_columns(store, "model_calls"):
            cost = store.query(
                "SELECT sum(cost_usd), countIf(input_tokens IS NOT NULL) FROM agentlog.model_calls "
                "WHERE run_id = {r:String}",
                {"r": world.store.crashed_run},
            ).rows[0]
            expected = "priced" if cost[0] else "unpriced" if cost[1] else "no_usage"
        else:
            expected = "absent"
    expect(page.locator("#cost")).to_have_attribute("data-state", expected)
    if expected == "priced":
        expect(page.locator("#cost")).to_contain_text("$")
    # The history gauge, against the warn threshold the UI was started with.
    expect(page.locator("svg.gauge").first).to_have_class("gauge over-warn")
    shot(page, "run")


def test_clicking_step_22_shows_the_refunds_idempotency_key(world: World, page: Page) -> None:
    page.goto(world.ui.url + f"/run/{world.store.crashed_run}")
    key = refund_key(world)
    page.click('svg.timeline .step-row[data-step="22"] .step-label')
    panel = page.locator("#detail")
    expect(panel).to_be_visible()
    expect(panel.locator(".call-detail")).to_have_count(2)  # the planner call and the refund
    expect(panel.locator(".idempotency-key")).to_have_text(key)
    expect(panel).to_contain_text('"amount": 41.6')
    shot(page, "run-step-22", full=False)
    # Clicking the refund's bar itself shows that one call.
    panel.locator(".close").click()
    expect(panel).to_be_hidden()
    page.locator('svg.timeline .call.tool[data-step="22"] rect').first.click(force=True)
    expect(panel.locator(".call-detail")).to_have_count(1)
    expect(panel.locator("h2")).to_contain_text("refund")
    expect(panel.locator(".idempotency-key")).to_have_text(key)


def test_the_diff_page_shows_the_first_divergence(world: World, page: Page) -> None:
    crashed, reset = world.store.crashed_run, world.store.reset_run
    # The reset's page names its original and links to the diff of the two.
    page.goto(world.ui.url + f"/run/{reset}")
    expect(page.locator("#parent")).to_contain_text(f"{crashed} before position {RESET_POSITION}")
    page.click("#parent >> text=diff with it")
    expect(page).to_have_url(f"{world.ui.url}/diff?a={crashed}&b={reset}")
    load(world, page, f"/diff?a={crashed}&b={reset}", "diff")
    first = page.locator("#first-divergence")
    expect(first).to_have_attribute("data-position", str(RESET_POSITION))
    expect(first.locator("h2")).to_contain_text(f"position {RESET_POSITION}: decision")
    # Both decisions side by side: the same step, different nonces from the scripted planner.
    expect(first.locator(".side.a pre").last).to_contain_text('"step": 21')
    expect(first.locator(".side.b pre").last).to_contain_text('"step": 21')
    assert first.locator(".side.a pre").last.inner_text() != first.locator(".side.b pre").last.inner_text()
    expect(page.locator(f'table.aligned tr.first[data-position="{RESET_POSITION}"]')).to_have_count(1)
    expect(page.locator("table.aligned tr.differs").first).to_have_attribute(
        "data-position", str(RESET_POSITION)
    )
    # The reset kept the original's idempotency keys: the refund is one effect, taken by both.
    expect(page.locator("table.effects tr.both")).to_have_count(3)
    shot(page, "diff")


def test_a_running_runs_page_updates_as_events_arrive(world: World, page: Page) -> None:
    """Live: the page polls the store (GET /run/ID/version every 2 s) and swaps in the new body."""
    for worker in world.workers:
        worker.stop()
    hang = {
        "REFUND_WORLD_DB": str(world.tmp / "live-world.db"),
        "REFUND_HANG_AT_STEP": "5",
        "REFUND_HANG_SECONDS": "6",
    }
    worker = WorkerProcess(world.deployment, REFUND_APP, "w2", world.tmp / "w-live.log", **hang)
    world.workers.append(worker)
    worker.wait_ready(world.deployment.partitions)
    client = Client(world.deployment)
    try:
        run_id = client.submit("refund", {"order": "777", "steps": 12}).run_id
        client.flush()
        url = world.ui.url + f"/run/{run_id}"
        wait_until(lambda: page.goto(url).status == 200, 30, "the live run to reach the store", interval=0.3)
        expect(page.locator("#run-main")).to_have_attribute("data-status", "running")
        expect(page.locator(".live")).to_be_visible()
        page.evaluate("() => { window.notReloaded = true; }")
        expect(page.locator("#steps")).to_have_text("12", timeout=60_000)
        expect(page.locator("#run-main")).to_have_attribute("data-status", "completed", timeout=30_000)
        assert page.evaluate("() => window.notReloaded === true")  # updated in place, not reloaded
        assert client.run(run_id).result(timeout=30)["steps"] == 12
        shot(page, "run-live-completed")
    finally:
        client.close()


def test_audit_diff_names_the_first_divergence_and_the_rest(world: World) -> None:
    crashed, reset = world.store.crashed_run, world.store.reset_run
    dsn = ("--dsn", world.store.dsn)
    as_json = agentlog(world.deployment, "audit", "diff", crashed, reset, "--json", *dsn)
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    first = result["first_divergence"]
    assert (first["position"], first["differs"]) == (RESET_POSITION, ["decision"])
    assert first["a"]["name"] == first["b"]["name"] == "planner"
    assert first["a"]["result"] != first["b"]["result"]
    # Before the seam the reset replayed the original's history: nothing differs there.
    assert all(d["position"] >= RESET_POSITION for d in result["differences"])
    assert result["counts"]["a"]["model_calls"] == result["counts"]["b"]["model_calls"] == 40
    assert (result["counts"]["a"]["in_doubt"], result["counts"]["b"]["in_doubt"]) == (1, 0)
    assert {e["tool"] for e in result["effects"]["both"]} == {"send_email", "refund", "create_ticket"}
    assert result["effects"]["only_a"] == result["effects"]["only_b"] == []
    text = agentlog(world.deployment, "audit", "diff", crashed, reset, *dsn)
    assert text.returncode == 0, text.stderr
    assert f"first divergence at position {RESET_POSITION}: decision" in text.stdout
    missing = agentlog(world.deployment, "audit", "diff", crashed, "no-such-run", *dsn)
    assert missing.returncode != 0 and "no run 'no-such-run'" in missing.stderr
