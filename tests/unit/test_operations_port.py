"""The worker's metrics and probes, on the in-memory log: what a scrape of /metrics reports after
runs, and when /readyz says ready (runtime.worker.metrics, runtime.worker.health, runtime.ops).
The same port on Kafka, scraped by a real Prometheus: tests/integration/test_operations_metrics.py."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from runtime.config import Settings
from runtime.log.records.events import EpochClaimed
from runtime.ops.server import OpsServer
from runtime.worker.health import Readiness
from runtime.worker.metrics import CALL_BUCKETS, Histogram, WorkerMetrics
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


class Flaky(Exception):
    """A failure the retry policy retries."""


def refund_app() -> App:
    app = App("unit-ops")
    failures = [1]

    @app.tool("lookup")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order, "amount": 30}

    @app.tool("refund", effect=True, retry=RetryPolicy(attempts=3, initial_backoff=0.001))
    def refund(order: str, amount: int, idempotency_key: str) -> str:
        if failures[0]:
            failures[0] -= 1
            raise Flaky("the payment service blinked")
        return f"refunded {amount}"

    @app.workflow("refund")
    async def workflow(ctx: Context, order: str) -> str:
        found = await ctx.tool("lookup", order=order)
        await ctx.sleep(0.001)
        result: str = await ctx.tool("refund", order=order, amount=found["amount"])
        return result

    @app.workflow("waits")
    async def waits(ctx: Context, order: str) -> Any:
        return await ctx.wait_signal("approved")

    return app


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, of a /metrics answer."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def _get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://127.0.0.1:{port}{path}", timeout=5)


async def test_a_scrape_counts_the_steps_calls_retries_and_runs_of_a_refund() -> None:
    h = Harness(refund_app(), settings=Settings(partitions=1, metrics_port=0))
    worker = h.start()
    await until(lambda: worker.owned and worker.ops is not None, what="the worker to own its partition")
    assert worker.ops is not None
    port = worker.ops.port
    run = h.client.submit("refund", "A-1").run_id
    waiting = h.client.submit("waits", "W-1").run_id
    status = await h.ended(run)
    assert status.status == "completed"
    text = (await _get(port, "/metrics")).text
    found = samples(text)
    assert (
        found[("agentlog_steps_total", (("workflow", "refund"),))] == 3
    )  # lookup, timer, refund (its retried failure is no step)
    assert (
        found[
            (
                "agentlog_calls_total",
                (("kind", "tool"), ("name", "refund"), ("outcome", "failed"), ("workflow", "refund")),
            )
        ]
        == 1
    )
    assert (
        found[
            (
                "agentlog_calls_total",
                (("kind", "tool"), ("name", "refund"), ("outcome", "completed"), ("workflow", "refund")),
            )
        ]
        == 1
    )
    assert found[("agentlog_call_retries_total", (("kind", "tool"), ("name", "refund")))] == 1
    assert found[("agentlog_call_duration_seconds_count", (("kind", "tool"), ("name", "refund")))] == 2
    assert (
        found[
            ("agentlog_call_duration_seconds_bucket", (("kind", "tool"), ("le", "+Inf"), ("name", "lookup")))
        ]
        == 1
    )
    assert found[("agentlog_runs_ended_total", (("status", "completed"), ("workflow", "refund")))] == 1
    assert found[("agentlog_runs_started_total", (("workflow", "waits"),))] == 1
    assert found[("agentlog_runs", (("state", "waiting"), ("workflow", "waits")))] == 1
    assert found[("agentlog_partitions_owned", ())] == 1
    assert found[("agentlog_takeover_duration_seconds_count", ())] == 1
    assert found[("agentlog_schema_cache_fallbacks_total", ())] == 0
    assert "process_cpu_seconds_total" in text
    assert run not in text and waiting not in text  # never a run id as a label
    await h.stop_all()


async def test_readyz_is_ready_once_the_partition_is_rebuilt_and_not_after_a_fence() -> None:
    h = Harness(refund_app(), settings=Settings(partitions=1, metrics_port=0))
    worker = h.start("zombie")
    await until(lambda: worker.owned and worker.ops is not None, what="the worker to own its partition")
    assert worker.ops is not None
    port = worker.ops.port
    assert (await _get(port, "/healthz")).status_code == 200
    ready = await _get(port, "/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")
    # Another worker claims the partition; the worker learns it at its next effect.
    foreign = EpochClaimed(run_id="", partition=0, worker="newer")
    h.log.append(h.settings.events_topic, 0, None, h.serde.encode(foreign)).result()
    h.client.submit("refund", "A-2")
    await until(lambda: not worker.owned, what="the worker to notice the newer claim")
    fenced = await _get(port, "/readyz")
    assert fenced.status_code == 503
    assert "fenced" in fenced.text
    assert (await _get(port, "/healthz")).status_code == 200  # alive, only not ready
    await h.stop_all()
    assert worker.ops is None  # the port closes with the worker


def test_readiness_follows_the_worker_through_start_assignment_and_stop() -> None:
    readiness = Readiness()
    assert readiness() is not None and readiness().startswith("starting")  # type: ignore[union-attr]
    readiness.assigning([0, 1])
    assert readiness() == "claiming and rebuilding partitions [0, 1]"
    readiness.assigned()
    assert readiness() is None
    readiness.lost(1, "revoked")
    assert readiness() is None  # a cooperative revoke leaves the rest served
    readiness.stopping()
    readiness.assigned()
    assert readiness() == "stopping"  # an assignment during the stop does not make it ready again


def test_the_port_answers_not_ready_with_the_reason_and_404_elsewhere() -> None:
    reason: list[str | None] = ["rebuilding partition 3"]
    server = OpsServer(CollectorRegistry(), lambda: reason[0], 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        answer = httpx.get(f"{base}/readyz", timeout=5)
        assert (answer.status_code, answer.text) == (503, "not ready: rebuilding partition 3\n")
        reason[0] = None
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        assert httpx.get(f"{base}/nope", timeout=5).status_code == 404
        assert httpx.get(f"{base}/metrics", timeout=5).status_code == 200
    finally:
        server.stop()


def test_histogram_buckets_are_cumulative_with_inf_last() -> None:
    histogram = Histogram(CALL_BUCKETS)
    for seconds in (0.0001, 0.003, 0.003, 100.0):
        histogram.observe(seconds)
    buckets = dict(histogram.buckets())
    assert buckets["0.0005"] == 1 and buckets["0.005"] == 3 and buckets["60.0"] == 3 and buckets["+Inf"] == 4
    assert histogram.total == pytest.approx(100.0061)


def test_steps_count_final_outcomes_not_retried_attempts() -> None:
    metrics = WorkerMetrics()
    metrics.call("refund", "tool", "refund", False, 0.01, False)  # retried: not a step
    metrics.call("refund", "tool", "refund", False, 0.01, True)  # final failure: raises in the workflow
    metrics.call("refund", "model", "decide", True, 0.2, True)
    metrics.step("refund")  # a timer
    assert metrics.steps() == {"refund": 3}


async def test_no_port_is_opened_without_metrics_port() -> None:
    h = Harness(refund_app())
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own its partition")
    await asyncio.sleep(0)
    assert worker.ops is None
    await h.stop_all()


def test_the_grafana_dashboard_charts_only_metrics_the_processes_expose() -> None:
    """infra/grafana/agentlog-dashboard.json against the families a worker and a sink expose."""
    import json
    import re
    from pathlib import Path
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from consumers.core import SinkStats
    from consumers.metrics import SinkCollector
    from runtime.log.schemas.serde import Serde
    from runtime.worker.metric_families import WorkerCollector

    registry = CollectorRegistry()
    serde = Serde.offline(Settings())
    registry.register(WorkerCollector(WorkerMetrics(), list, serde, SimpleNamespace(value={0: 1})))  # type: ignore[arg-type]
    registry.register(SinkCollector(SimpleNamespace(stats=SinkStats()), SimpleNamespace(value={0: 2}), "t"))  # type: ignore[arg-type]
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    exposed = {s.name for f in families for s in f.samples} | {
        f.name + ("_total" if f.type == "counter" else "") for f in families
    }
    dashboard = json.loads(
        Path(__file__).resolve().parents[2].joinpath("infra/grafana/agentlog-dashboard.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    charted = {name for expr in exprs for name in re.findall(r"\bagentlog_[a-z_]+", expr)}
    histograms = {n.removesuffix("_bucket") for n in charted if n.endswith("_bucket")}
    assert charted - histograms, "the dashboard charts no agentlog metric"
    missing = {n for n in charted if n not in exposed and n.removesuffix("_bucket") not in exposed}
    assert missing == set()


def test_a_worker_fenced_by_the_group_is_not_ready_until_assigned_again() -> None:
    readiness = Readiness()
    readiness.assigned()
    readiness.fenced("membership fenced")
    assert readiness() == "fenced by the workers' group (membership fenced); rejoining"
    readiness.assigning([2])
    readiness.assigned()
    assert readiness() is None
