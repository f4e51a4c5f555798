"""The operations port of `agentlog worker` and `agentlog sink`, scraped by a real Prometheus.

A worker and a sink run as subprocesses with ``--metrics-port``; a Prometheus server (Debian's
package, its own config and data folder, free ports) scrapes both every second while refund runs
execute; the test asks Prometheus' HTTP API what it saw: the runs' steps and calls counted, the
sink's rows, no run id among the label values. The probes answer on the same ports.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from runtime.client import Client
from runtime.config import Settings
from support.ops_apps import app as ops_app
from support.prometheus import PrometheusServer, free_port
from support.services import ROOT
from support.sink import SinkProcess
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

APP = "support.ops_apps:app"
RUNS = 3
LOOKUPS = 4
STEPS_PER_RUN = 2 + LOOKUPS  # the decision, the lookups, the refund


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)


def test_prometheus_scrapes_the_worker_and_the_sink_during_refund_runs(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    assert "refund" in ops_app.workflows
    worker_port, sink_port = free_port(), free_port()
    worker = WorkerProcess(
        deployment,
        APP,
        "w1",
        tmp_path / "w1.log",
        "--metrics-port",
        str(worker_port),
        TEST_COUNTER_DIR=str(tmp_path),
    )
    workers.append(worker)
    sink = SinkProcess(
        deployment,
        f"chdb://{tmp_path / 'analytics'}",
        tmp_path / "sink.log",
        "direct",
        "--metrics-port",
        str(sink_port),
    )
    prometheus = PrometheusServer(tmp_path / "prometheus", {"worker": worker_port, "sink": sink_port})
    client = Client(deployment)
    try:
        worker.wait_ready(deployment.partitions)
        wait_until(
            lambda: _ready(worker_port),
            30,
            "the worker's /readyz",
            process=worker.proc,
            detail=worker.log_tail,
        )
        assert _get(worker_port, "/healthz").status_code == 200
        wait_until(
            lambda: _ready(sink_port), 60, "the sink's /readyz", process=sink.proc, detail=sink.log_tail
        )

        run_ids = [
            client.submit("refund", {"order": f"4821{n}", "lookups": LOOKUPS}).run_id for n in range(RUNS)
        ]
        for run_id in run_ids:
            assert client.run(run_id).result(timeout=60)["refunded"] == 41.6

        expected = RUNS * STEPS_PER_RUN
        steps = 'sum(agentlog_steps_total{job="worker",workflow="refund"})'
        wait_until(
            lambda: prometheus.value(steps) == expected,
            30,
            f"Prometheus to see {expected} steps of the refund workflow",
            interval=0.5,
            detail=lambda: f"{prometheus.query(steps)} {prometheus.targets_up()}\n{worker.log_tail()}",
        )
        calls = prometheus.query('agentlog_calls_total{job="worker",workflow="refund",outcome="completed"}')
        by_name = {(c["metric"]["kind"], c["metric"]["name"]): float(c["value"][1]) for c in calls}
        assert by_name == {
            ("model", "decide"): RUNS,
            ("tool", "lookup_order"): RUNS * LOOKUPS,
            ("tool", "issue_refund"): RUNS,
        }
        assert prometheus.value('sum(agentlog_runs_ended_total{job="worker",status="completed"})') == RUNS
        assert (
            prometheus.value('agentlog_call_duration_seconds_count{kind="tool",name="issue_refund"}') == RUNS
        )
        assert prometheus.value('agentlog_partitions_owned{job="worker"}') == deployment.partitions
        # The commands lag is sampled every 5 s: once every command is handled, it reads 0 everywhere.
        lag = 'sum(agentlog_commands_lag{job="worker"})'
        wait_until(lambda: prometheus.value(lag) == 0, 30, "the commands lag to read 0", interval=0.5)

        # The sink copied every record of the runs and is behind by none of them.
        records = sum(len(client.run(run_id).history()) for run_id in run_ids)
        wait_until(
            lambda: (prometheus.value('sum(agentlog_sink_rows_written_total{job="sink"})') or 0) >= records,
            60,
            f"the sink's rows to reach the runs' {records} records",
            interval=0.5,
            detail=sink.log_tail,
        )
        behind = 'sum(agentlog_sink_records_behind{job="sink"})'
        wait_until(
            lambda: prometheus.value(behind) == 0, 30, "the sink to be behind by 0 records", interval=0.5
        )

        # Low cardinality: no series anywhere carries a run id.
        series = httpx.get(
            f"{prometheus.url}/api/v1/series", params={"match[]": '{__name__=~"agentlog_.*"}'}
        ).json()
        label_values = {v for s in series["data"] for v in s.values()}
        assert not label_values & set(run_ids)
        assert prometheus.targets_up() == {"worker": "up", "sink": "up"}

        # Every expression of the Grafana dashboard is valid PromQL here, and the steps panel shows the runs.
        for expr in _dashboard_expressions():
            prometheus.query(expr)  # asserts status "success"
        steps_panel = next(
            e for e in _dashboard_expressions() if "agentlog_steps_total" in e and "by (workflow)" in e
        )
        assert prometheus.query(steps_panel.replace("[1m]", "[5m]"))
    finally:
        client.close()
        prometheus.stop()
        sink.stop()


def _dashboard_expressions() -> list[str]:
    """The dashboard's queries with its variables filled in as Grafana would for this test."""
    dashboard = json.loads((ROOT / "infra" / "grafana" / "agentlog-dashboard.json").read_text())
    return [
        t["expr"]
        .replace("$__rate_interval", "1m")
        .replace("$worker_job", "worker")
        .replace("$sink_job", "sink")
        for panel in dashboard["panels"]
        for t in panel.get("targets", [])
    ]


def _ready(port: int) -> bool:
    try:
        return _get(port, "/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def test_a_sink_waiting_for_the_store_is_alive_but_not_ready_until_it_holds_it(
    deployment: Settings, tmp_path: Path
) -> None:
    """Two sinks on one embedded store: the second waits for the first's lock -- alive (/healthz),
    not ready (/readyz says why) -- and is ready once the first stops and it takes the store."""
    dsn = f"chdb://{tmp_path / 'analytics'}"
    first_port, second_port = free_port(), free_port()
    first = SinkProcess(deployment, dsn, tmp_path / "sink1.log", "direct", "--metrics-port", str(first_port))
    second: SinkProcess | None = None
    try:
        wait_until(
            lambda: _ready(first_port),
            60,
            "the first sink's /readyz",
            process=first.proc,
            detail=first.log_tail,
        )
        second = SinkProcess(
            deployment, dsn, tmp_path / "sink2.log", "direct", "--metrics-port", str(second_port)
        )
        waiting = wait_until(
            lambda: _answer(second_port, "/readyz"), 30, "the second sink's port", process=second.proc
        )
        assert waiting.status_code == 503
        assert "waiting for the analytics store" in waiting.text
        assert _get(second_port, "/healthz").status_code == 200
        assert first.stop() == 0
        wait_until(
            lambda: _ready(second_port),
            60,
            "the second sink's /readyz",
            process=second.proc,
            detail=second.log_tail,
        )
    finally:
        if first.proc.poll() is None:
            first.stop()
        if second is not None:
            second.stop()


def _answer(port: int, path: str) -> httpx.Response | None:
    try:
        return _get(port, path)
    except httpx.HTTPError:
        return None
