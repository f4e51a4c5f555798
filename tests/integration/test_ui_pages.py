"""The UI's pages on a real store: tokens and cost appear once the store has them.

Issue 13 adds usage and price columns to the ``model_calls`` view. The UI looks the columns up
instead of naming a migration, so on a store without them every page renders and says cost is
not recorded; once the view has them (here: the view replaced by one with fixed usage, as a
migration would), the runs page, the run page, the call panel and the diff show them.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics.migrations import MIGRATIONS_LIST
from analytics.store import StoreLock, connect, parse_dsn
from runtime.config import Settings
from runtime.log.records.chain import START, ChainKey, link_of, seal
from runtime.log.records.signing import SIGNED_TYPES, public_text, sign
from support.sink import EventLog, InProcessSink, RunWriter, wait_for_rows
from support.ui_store import free_port
from ui import pages
from ui.server import UiServer

pytestmark = pytest.mark.integration

PROMPT = '[{"role":"user","content":"refund order 42?"}]'
# model_calls as migration 3 released it: no usage, no cost.
(_MODEL_CALLS_VIEW,) = [s for s in MIGRATIONS_LIST[2].statements if "VIEW agentlog.model_calls" in s]


def _priced_view(tokens: str = "toInt64(120)", cost: str = "0.0015", output: str = "toInt64(30)") -> str:
    """The released view, with usage columns on top (what a pricing migration gives the UI)."""
    head, select = _MODEL_CALLS_VIEW.split(" AS\n", 1)
    return (
        f"{head} AS SELECT *, {tokens} AS input_tokens, {output} AS output_tokens, "
        f"CAST(NULL AS Nullable(Int64)) AS cached_tokens, {cost} AS cost_usd, '{PROMPT}' AS messages FROM ({select})"
    )


def test_cost_and_tokens_appear_when_the_store_has_them(deployment: Settings, tmp_path: Path) -> None:
    log = EventLog(deployment)
    records = RunWriter("ui-run-a").history(steps=2) + RunWriter("ui-run-b").history(steps=2)
    log.append(records)
    dsn = f"chdb://{tmp_path / 'store'}"
    with InProcessSink(deployment, dsn):
        wait_for_rows(dsn, deployment.events_topic, len(records))

    with connect(dsn) as store:
        store.query(_MODEL_CALLS_VIEW)  # the view as released, whatever later migrations made of it
        runs = pages.runs_page(store, deployment, {})
        run = pages.run_data(store, deployment, "ui-run-a")
        html = pages.run_page(store, deployment, "ui-run-a")
        call = pages.run_calls(store, deployment, "ui-run-a", {"positions": "1"})
    assert re.search(r'data-run="ui-run-a"', runs) and "$" not in runs
    assert run["cost"] is None and run["timeline"].steps == 2
    assert "not recorded in this store" in html and 'data-state="absent"' in html
    assert "gpt-test" in call and "usage-input_tokens" not in call and "not recorded" in call

    with connect(dsn) as store:
        store.query(_priced_view())
        runs = pages.runs_page(store, deployment, {"sort": "cost"})
        run = pages.run_data(store, deployment, "ui-run-a")
        html = pages.run_page(store, deployment, "ui-run-a")
        call = pages.run_calls(store, deployment, "ui-run-a", {"positions": "1"})
        diff = pages.diff_page(store, deployment, {"a": "ui-run-a", "b": "ui-run-b"})
    assert "$0.0030" in runs  # two priced planner calls per run
    assert run["cost"] == pytest.approx(0.003) and run["tokens"]["input_tokens"] == 240
    assert re.search(r'<dd id="cost" data-state="priced">\$0\.0030', html)
    # The call panel (fetched when the call is clicked): tokens, cost and the prompt from the store.
    assert '<dd class="usage-input_tokens">120</dd>' in call and '<dd class="usage-cost">$0.0015</dd>' in call
    assert "refund order 42?" in call
    assert "Tokens and cost" in diff and "cost_usd 0.003" in diff
    with connect(dsn) as store:
        store.query(_priced_view(cost="if(run_id = 'ui-run-a', 0.0015, NULL)"))
        runs = pages.runs_page(store, deployment, {"sort": "cost"})
    # A run with no priced call has no cost (blank), not $0.
    assert re.search(r'data-run="ui-run-b".*?<td class="num"></td>\s*<td>', runs, re.S)

    # The column is there but holds no cost: the page says why.
    null_cost = "CAST(NULL AS Nullable(Float64))"
    with connect(dsn) as store:
        store.query(_priced_view(cost=null_cost))
        unpriced = pages.run_page(store, deployment, "ui-run-a")
        no_tokens = "CAST(NULL AS Nullable(Int64))"
        store.query(_priced_view(tokens=no_tokens, cost=null_cost, output=no_tokens))
        no_usage = pages.run_page(store, deployment, "ui-run-a")
    assert 'data-state="unpriced"' in unpriced and "input tokens 240" in unpriced
    assert 'data-state="no_usage"' in no_usage and "reported no token usage" in no_usage


def test_without_a_sink_the_ui_opens_the_store_per_request_and_lets_go(
    deployment: Settings, tmp_path: Path
) -> None:
    """The UI never keeps the embedded store from a sink that starts later: with no sink running it
    opens the store for a request and releases the lock after it; then a sink holds the store and
    the UI reads through its query port."""
    log = EventLog(deployment)
    records = RunWriter("ui-run-c").history(steps=1)
    log.append(records)
    dsn = f"chdb://{tmp_path / 'store'}"
    with InProcessSink(deployment, dsn):
        wait_for_rows(dsn, deployment.events_topic, len(records))
    server = UiServer(deployment, dsn, "127.0.0.1", free_port())
    server.start()
    try:
        with urllib.request.urlopen(server.url + "run/ui-run-c", timeout=60) as response:
            assert response.status == 200 and "ui-run-c" in response.read().decode()
        lock = StoreLock(parse_dsn(dsn))
        assert lock.try_acquire(), "the UI kept the store locked after its request"
        lock.release()
        more = RunWriter("ui-run-d").history(steps=1)
        log.append(more)
        with InProcessSink(deployment, dsn):  # holds the lock now: the UI goes through its port
            wait_for_rows(dsn, deployment.events_topic, len(records) + len(more))
            with urllib.request.urlopen(server.url + "?sort=run_id&dir=asc", timeout=60) as response:
                body = response.read().decode()
            assert 'data-run="ui-run-c"' in body and 'data-run="ui-run-d"' in body
    finally:
        server.stop()


def test_with_the_verify_key_a_run_whose_ending_no_worker_signed_shows_forged(
    deployment: Settings, tmp_path: Path
) -> None:
    """Issue 40: the UI holding the workers' public key names a status no worker signed: FORGED on
    the runs list and the run page, in place of the forged status; a genuine run shows its own."""
    signer = Ed25519PrivateKey.generate()
    chain = ChainKey(b"the workers' chain key")
    log = EventLog(deployment)
    rows = 0
    for run_id, forged in (("ui-run-signed", False), ("ui-run-forged", True)):
        writer = RunWriter(run_id)
        tip = START
        for event in writer.history(steps=1):
            value = log.serde.encode(event)
            if event.type in SIGNED_TYPES and not (forged and event.type == "RunCompleted"):
                value = sign(signer, run_id.encode(), tip, value)
            value = seal(chain, run_id.encode(), tip, value)
            tip = link_of(value) or START
            log.append_raw(value, log.partition(run_id), run_id.encode())
            rows += 1
    dsn = f"chdb://{tmp_path / 'store'}"
    with InProcessSink(deployment, dsn):
        wait_for_rows(dsn, deployment.events_topic, rows)

    verifying = deployment.model_copy(update={"verify_key": public_text(signer)})
    with connect(dsn) as store:
        runs = pages.runs_page(store, verifying, {})
        forged_page = pages.run_page(store, verifying, "ui-run-forged")
        signed_page = pages.run_page(store, verifying, "ui-run-signed")
        unverified = pages.run_page(store, deployment, "ui-run-forged")
    row = re.search(r'data-run="ui-run-forged".*?</tr>', runs, re.S)
    assert row is not None and ">FORGED<" in row.group(0) and "no worker&#39;s signature" in row.group(0)
    good = re.search(r'data-run="ui-run-signed".*?</tr>', runs, re.S)
    assert good is not None and '<span class="status completed">completed</span>' in good.group(0)
    assert (
        ">FORGED<" in forged_page and '<span class="status completed">' not in forged_page.split("</h1>")[0]
    )
    assert ">FORGED<" not in signed_page and '<span class="status completed">' in signed_page
    assert ">FORGED<" not in unverified  # without the key the UI cannot tell
