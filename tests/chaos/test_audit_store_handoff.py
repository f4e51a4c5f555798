"""``agentlog audit`` while the sink holds the store (it answers through the sink) and after the
sink was SIGKILLed (the lock died with it: audit opens the store itself), through the real CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from analytics.proxy import Endpoint
from analytics.store import StoreLock, parse_dsn
from runtime.config import Settings
from support.sink import EventLog, RunWriter, SinkProcess, agentlog, make_deployment, wait_for_rows

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_while_the_sink_runs_audit_asks_it_and_after_a_kill_audit_opens_the_store(
    services: Settings, tmp_path: Path
) -> None:
    settings = make_deployment(services, partitions=2)
    log = EventLog(settings)
    run = RunWriter("run-one-process")
    log.append(run.history(1))
    dsn = f"chdb://{tmp_path / 'analytics'}"
    location = parse_dsn(dsn)
    sink = SinkProcess(settings, dsn, tmp_path / "sink.log")
    try:
        wait_for_rows(dsn, settings.events_topic, 6, proc=sink.proc)
        endpoint = Endpoint.read(location.endpoint_path)
        assert endpoint is not None and endpoint.pid == sink.proc.pid
        assert not StoreLock(location).try_acquire()  # nobody else may open the store now
        served = agentlog(settings, "audit", "run", run.run_id, "--dsn", dsn, "--json")
        assert served.returncode == 0, served.stderr
        sink.kill()
    finally:
        sink.stop()
    assert Endpoint.read(location.endpoint_path) == endpoint  # stale, and ignored: the lock is free
    started = time.monotonic()
    direct = agentlog(settings, "audit", "run", run.run_id, "--dsn", dsn, "--json")
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout) == json.loads(served.stdout)  # same answer either way
    assert time.monotonic() - started < 30
    missing = agentlog(settings, "audit", "run", "no-such-run", "--dsn", dsn)
    assert missing.returncode == 1 and "no events" in missing.stderr
