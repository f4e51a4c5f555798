"""Deployment-wide limits, end to end: real Kafka, real worker processes, and fakes of the tests'
own that enforce the limits as the services do (support.limited_provider).

The issue's fleet test is 200 runs of 5 calls at 60 requests/min (17 minutes); here the same
claims hold on a shape that takes about 70 s: 320 calls at 300 requests/min and 15,000
tokens/min (50 tokens a call, so both limits bind), over 3 worker processes, one of them killed
(SIGKILL) while it holds permits.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path

import pytest

from analytics.audit import run_events
from analytics.store import connect
from runtime.client import Client
from runtime.config import Settings
from support.limited_provider import Arrival, limited_provider, payments_service
from support.services import agentlog
from support.sink import InProcessSink, query, scalar
from support.wait import wait_until
from support.workers import WorkerProcess
from ui import timeline

pytestmark = pytest.mark.integration

APP = "support.limited_apps:app"
SESSION_TIMEOUT_S = 6.0  # the workers' group session timeout (support.workers' default, 6000 ms)
MARGIN = 1.05  # "in no 60 s window more than the limit plus 5 %"


def start_workers(
    deployment: Settings,
    workers: list[WorkerProcess],
    tmp_path: Path,
    count: int,
    limits: dict[str, dict[str, float]],
    **env: str,
) -> list[WorkerProcess]:
    started = [
        WorkerProcess(
            deployment,
            APP,
            f"w{i}",
            tmp_path / f"w{i}.log",
            AGENTLOG_LIMITS=json.dumps(limits),
            WORKER_NAME=f"w{i}",
            SESSION_TIMEOUT_MS=str(int(SESSION_TIMEOUT_S * 1000)),
            **env,
        )
        for i in range(1, count + 1)
    ]
    workers.extend(started)
    for worker in started:
        worker.wait_ready(1, timeout=60)
    return started


def logs(workers: list[WorkerProcess]) -> str:
    return "\n".join(w.log_tail(1500) for w in workers)


def test_rate_and_token_limits_hold_across_three_workers_and_a_kill(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    rpm, tpm, runs, calls = 300, 15_000, 64, 5
    with limited_provider(rpm, tpm, latency_s=0.2) as provider:
        fleet = start_workers(
            deployment,
            workers,
            tmp_path,
            3,
            {"openai": {"requests_per_minute": rpm, "tokens_per_minute": tpm}},
            LIMITED_PROVIDER_URL=provider.url,
        )
        client = Client(deployment)
        try:
            handles = [client.submit("calls", {"calls": calls}, run_id=f"fleet-{i:03d}") for i in range(runs)]
            # A third of the way in, kill a worker with a request in flight: it holds permits (its
            # share of the rate and of the tokens, leased from the deployment).
            wait_until(
                lambda: len(provider.arrivals) >= runs * calls // 3,
                120,
                "a third of the calls",
                detail=lambda: logs(fleet),
            )
            victim_name = wait_until(provider.busy, 10, "a worker with a request in flight")
            victim = next(w for w in fleet if w.worker_id == victim_name)
            victim.kill()
            killed_at = time.time()
            results = [handle.result(timeout=180) for handle in handles]
        finally:
            client.close()
        arrivals = list(provider.arrivals)
    assert results == [calls] * runs, "every run completes, none failed"
    most_requests, most_tokens = provider.most_in_window()
    refused = sum(1 for a in arrivals if a.status == 429)
    print(  # the figures the closing note quotes
        f"\n{len(arrivals)} requests, {refused} answered 429; most in a 60 s window: {most_requests} requests "
        f"(limit {rpm}), {most_tokens} tokens (limit {tpm}); run took {arrivals[-1].at - arrivals[0].at:.1f} s"
    )
    assert most_requests <= rpm * MARGIN, f"{most_requests} requests in one 60 s window, limit {rpm}"
    assert most_tokens <= tpm * MARGIN, f"{most_tokens} tokens in one 60 s window, limit {tpm}"
    gap = longest_gap(arrivals, victim_name, killed_at)
    print(f"longest gap between the survivors' requests around the kill: {gap:.2f} s")
    assert gap <= SESSION_TIMEOUT_S, f"the survivors waited {gap:.1f} s after the kill"


def longest_gap(arrivals: list[Arrival], victim: str, killed_at: float) -> float:
    """The longest pause between two consecutive requests of the surviving workers, from just
    before the kill until their last request (the end of the run's calls)."""
    times = sorted(a.at for a in arrivals if a.worker != victim and a.at >= killed_at - 1.0)
    edges = [killed_at, *times] if times else [killed_at]
    return max((b - a for a, b in itertools.pairwise(edges)), default=0.0)


def test_a_payment_api_allowing_five_calls_never_sees_six_across_three_workers(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    with payments_service(allowed=5, seconds=0.2) as payments:
        start_workers(
            deployment, workers, tmp_path, 3, {"payments": {"concurrent": 5}}, PAYMENTS_URL=payments.url
        )
        client = Client(deployment)
        try:
            handles = [client.submit("pay", {"order": f"o-{i}"}, run_id=f"pay-{i:03d}") for i in range(60)]
            results = [handle.result(timeout=90) for handle in handles]
        finally:
            client.close()
    print(
        f"\npayments: {payments.completed} completed, most in flight {payments.most_in_flight}, refused {payments.refused}"
    )
    assert results == [f"o-{i}" for i in range(60)]
    assert payments.most_in_flight <= 5
    assert payments.refused == 0
    assert payments.completed == 60


def cli_status_waiting(deployment: Settings, run_id: str) -> str | None:
    """``agentlog status RUN``'s output once it shows the run waiting for tenant A's limit."""
    out = agentlog(deployment, "status", run_id).stdout
    return out if "waiting   for tenant-calls[A] requests/min" in out else None


def test_a_burst_of_one_tenant_does_not_delay_another(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """120 requests/min per tenant (2 a second): 30 calls of tenant A take about 15 s; tenant B's 4
    calls, submitted behind them, start within B's own limit."""
    with limited_provider(10_000, 10_000_000) as provider:
        start_workers(
            deployment,
            workers,
            tmp_path,
            1,
            {"tenant-calls": {"requests_per_minute": 120}},
            LIMITED_PROVIDER_URL=provider.url,
        )
        client = Client(deployment)
        try:
            submitted_a = time.time()
            burst = [client.submit("tenant", {"tenant": "A"}, run_id=f"a-{i:02d}") for i in range(30)]
            # A run of A shows its wait while the burst is throttled.
            shown = wait_until(
                lambda: next((w for h in burst for w in h.status().waiting_for), None),
                30,
                "a run of tenant A to show it waits for its permit",
            )
            # `agentlog status` says what the last of them waits for, and for how long.
            status = wait_until(
                lambda: cli_status_waiting(deployment, "a-29"), 20, "`agentlog status a-29` to show its wait"
            )
            submitted_b = time.time()
            others = [client.submit("tenant", {"tenant": "B"}, run_id=f"b-{i:02d}") for i in range(4)]
            assert [h.result(timeout=30) for h in others] == ["B"] * 4
            assert [h.result(timeout=60) for h in burst] == ["A"] * 30
        finally:
            client.close()
    by_tenant = {t: sorted(a.at for a in provider.arrivals if a.tenant == t) for t in ("A", "B")}
    b_delay = by_tenant["B"][-1] - submitted_b
    a_span = by_tenant["A"][-1] - submitted_a
    print(f"\ntenant A's 30 calls took {a_span:.1f} s; tenant B's 4 calls all started within {b_delay:.1f} s")
    assert (shown.limit, shown.key, shown.dimension) == ("tenant-calls", "A", "requests_per_minute")
    assert a_span >= 12.0, "tenant A's burst was held to its limit"
    # B's own limit lets its 4 calls through in about 1.5 s (2 a second after a burst of 2).
    assert b_delay <= 4.0, f"tenant B waited {b_delay:.1f} s behind tenant A's burst"
    print(status)
    assert re.search(r"waiting   for tenant-calls\[A\] requests/min, \d+ s \(position 1\)", status), status
    # The audit store answers "why did this step take 14 s" from the records the worker wrote.
    dsn = f"chdb://{tmp_path / 'analytics'}"
    with InProcessSink(deployment, dsn):
        wait_until(
            lambda: scalar(dsn, "SELECT count() FROM agentlog.permit_waits WHERE run_id LIKE 'a-%'") >= 20,
            60,
            "the sink to copy the permit waits",
            interval=0.5,
        )
        slowest = query(
            dsn,
            "SELECT run_id, position, waited_ms, detail FROM agentlog.permit_waits ORDER BY waited_ms DESC LIMIT 1",
        ).rows[0]
        with connect(dsn) as store:  # the UI's run page draws the run from the same rows
            line = timeline.build(run_events(store, str(slowest[0]), deployment.events_topic))
    print(f"slowest wait in the audit store: {slowest}")
    assert [f.detail for f in line.flags if f.kind == "permit_wait"] == [slowest[3].split(") ", 1)[1]]
    assert slowest[1] == 1 and slowest[2] >= 10_000, slowest
    assert re.fullmatch(
        r"position 1 \(attempt 1\) waited \d+\.\d s for tenant-calls\[A\] requests/min", slowest[3]
    )
