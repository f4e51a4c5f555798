"""Prices change while the sink runs, and a call is priced by the first of its names with a price.

A real worker records three runs; a sink holds the embedded store for the whole test. ``agentlog
audit prices load`` reaches the store through the sink's query port (a second process may not
open the path), and ``audit cost`` re-prices the existing runs at once. Each run names its model
differently: one through the provider's reported model, one only through the call's ``model``
parameter, one only through the registered name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.store import StoreLock, parse_dsn
from runtime.client import Client
from runtime.config import Settings
from support.sink import SinkProcess, agentlog, kafka_offsets, make_deployment, wait_for_rows
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

HEADER = "model,from_date,input_per_million,output_per_million,cached_per_million\n"
# ``bare`` is a registered model name and ``acme-small`` a call's model parameter; the chat
# model reports ``fake-chat-1`` although its call passes ``model="acme-small"``.
PRICES = (
    HEADER
    + "fake-chat-1,2020-01-01,2.00,8.00,0.00\nacme-small,2020-01-01,1.00,3.00,0.00\nbare,2020-01-01,5.00,7.00,0.00\n"
)


def cost_by_run(settings: Settings, dsn: str) -> dict[str, dict[str, object]]:
    done = agentlog(settings, "audit", "cost", "--by", "run", "--dsn", dsn, "--json")
    assert done.returncode == 0, done.stderr
    return {str(row["run"]): row for row in json.loads(done.stdout)}


def load(settings: Settings, dsn: str, path: Path) -> None:
    done = agentlog(settings, "audit", "prices", "load", str(path), "--dsn", dsn, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["loaded"] == 3


def test_prices_loaded_through_a_running_sink_reprice_history_by_the_first_name_priced(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    settings = make_deployment(services, partitions=1)
    worker = WorkerProcess(settings, "support.audit_apps:app", "w1", tmp_path / "worker.log")
    workers.append(worker)
    worker.wait_ready(1)
    with Client(settings) as client:
        reported = client.submit("priced", {"call": "chat", "model": "acme-small"}).run_id
        param = client.submit("priced", {"call": "bare", "model": "acme-small"}).run_id
        registered = client.submit("priced", {"call": "bare"}).run_id
        for run in (reported, param, registered):
            client.run(run).result(timeout=60)

    dsn = f"chdb://{tmp_path}/store"
    sink = SinkProcess(settings, dsn, tmp_path / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
        lock = StoreLock(parse_dsn(dsn))
        assert not lock.try_acquire() and lock.holder() == sink.proc.pid  # the sink holds the store

        prices = tmp_path / "prices.csv"
        prices.write_text(PRICES)
        load(settings, dsn, prices)
        rows = cost_by_run(settings, dsn)
        # chat: 100 prompt tokens (one message), 20 completion, cached 50 priced at 0.
        assert rows[reported]["priced_by"] == "response_model"
        assert rows[reported]["cost_usd"] == pytest.approx(50 * 2e-6 + 20 * 8e-6)
        assert rows[param]["priced_by"] == "model_param"
        assert rows[param]["cost_usd"] == pytest.approx(1000 * 1e-6 + 100 * 3e-6)
        assert rows[registered]["priced_by"] == "registered_name"
        assert rows[registered]["cost_usd"] == pytest.approx(1000 * 5e-6 + 100 * 7e-6)
        assert all(row["unpriced_calls"] == 0 for row in rows.values())

        # A corrected file, loaded while the sink keeps running, re-prices the same runs.
        prices.write_text(PRICES.replace("acme-small,2020-01-01,1.00", "acme-small,2020-01-01,10.00"))
        load(settings, dsn, prices)
        again = cost_by_run(settings, dsn)
        assert again[param]["cost_usd"] == pytest.approx(1000 * 10e-6 + 100 * 3e-6)
        assert again[registered]["cost_usd"] == rows[registered]["cost_usd"]
        assert sink.proc.poll() is None, sink.log_tail()

        # A malformed file is refused before it reaches the sink; the prices in force stay.
        prices.write_text(HEADER + "acme-small,2020-01-01,free,1,1\n")
        bad = agentlog(settings, "audit", "prices", "load", str(prices), "--dsn", dsn)
        assert bad.returncode != 0 and "input 'free' is not a number" in bad.stderr
        assert cost_by_run(settings, dsn)[param]["cost_usd"] == again[param]["cost_usd"]
    finally:
        assert sink.stop() == 0, sink.log_tail()
