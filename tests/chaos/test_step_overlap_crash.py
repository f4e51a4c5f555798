"""A call that is not an effect starts before its Scheduled record is acknowledged
(runtime.worker.execution); a worker SIGKILLed then, with that record not durable, leaves no trace
of the call: its successor runs it again as a first attempt, records it once, and reports nothing
in doubt.

The record is kept from being durable for real: one Kafka node of its own (ports 27800/27810)
advertises a TCP proxy (bench/tcp_proxy.py, 27820), and the proxy becomes a black hole while the
run waits on a durable timer, so the Scheduled record the timer's end appends never reaches the
node. The shared registry serves the schemas.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.tcp_proxy import CuttableProxy
from infra import kafka, process
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import TimerScheduled, ToolCallCompleted, ToolCallScheduled
from support.events import LogReader
from support.overlap_apps import calls_of
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

APP = "support.overlap_apps:app"
NODE_PORT, CONTROLLER_PORT, PROXY_PORT = 27800, 27810, 27820


@pytest.fixture(scope="module")
def proxied_node(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, CuttableProxy]]:
    """One Kafka node reached only through a cuttable proxy, and the shared registry."""
    settings = services.model_copy(
        update={
            "state_dir": tmp_path_factory.mktemp("proxied-node"),
            "kafka_port": NODE_PORT,
            "kafka_controller_port": CONTROLLER_PORT,
        }
    )
    busy = [p for p in (NODE_PORT, CONTROLLER_PORT, PROXY_PORT) if process.port_open("127.0.0.1", p)]
    assert not busy, f"ports {busy} are in use: a node of an earlier, aborted run may still be up"
    kafka.configure(settings, 1)
    proxy = CuttableProxy(PROXY_PORT, NODE_PORT)
    kafka.advertise_through(settings, {1: PROXY_PORT})
    settings = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{PROXY_PORT}"})
    try:
        kafka.start(settings, lambda _m: None)
        yield settings, proxy
    finally:
        kafka.stop(settings)
        proxy.close()


def test_a_read_only_call_killed_before_its_scheduled_ack_runs_again_recorded_once_not_in_doubt(
    proxied_node: tuple[Settings, CuttableProxy], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    node, proxy = proxied_node
    deployment = scratch_deployment(node, partitions=1, prefix="overlap")
    db = str(tmp_path / "world.db")
    sqlite3.connect(db).close()
    first = WorkerProcess(
        deployment, APP, "w1", tmp_path / "w1.log", OVERLAP_WORLD_DB=db, OVERLAP_HANG="after"
    )
    workers.append(first)
    first.wait_ready(1)
    client = Client(deployment)
    run = client.submit("overlap", {"sleep_s": 3.0}).run_id
    client.flush()
    reader = LogReader(deployment)
    try:
        wait_until(
            lambda: any(isinstance(e, TimerScheduled) and e.run_id == run for _, e in reader.events(0)),
            30,
            "the run's timer to be durable",
            process=first.proc,
            detail=first.log_tail,
        )
        proxy.cut()  # from here nothing the worker sends reaches the node
        # The timer ends (no broker needed), "after" is scheduled -- into the black hole -- and,
        # not being an effect, starts at once: its row shows, then it hangs.
        wait_until(
            lambda: calls_of(db, "after") == 1,
            30,
            "the second call to start",
            process=first.proc,
            detail=first.log_tail,
        )
        first.kill()
        proxy.restore()
        before = [e for _, e in reader.events(0) if e.run_id == run]
        assert len([e for e in before if isinstance(e, ToolCallScheduled)]) == 1, (
            "the second call's Scheduled record reached the log: this test's premise failed"
        )

        second = WorkerProcess(deployment, APP, "w1", tmp_path / "w1b.log", OVERLAP_WORLD_DB=db)
        workers.append(second)
        assert client.run(run).result(timeout=60) == ["noted before", "noted after"]
        assert calls_of(db, "before") == 1  # served from the log
        assert calls_of(db, "after") == 2  # it left no record, so it ran again
        events = [e for _, e in reader.events(0) if e.run_id == run]
        recorded = Counter((e.type, getattr(e, "position", -1)) for e in events)
        assert [key for key, n in recorded.items() if n > 1] == []  # nothing recorded twice
        completions = [e for e in events if isinstance(e, ToolCallCompleted)]
        assert [(e.attempt, e.in_doubt) for e in completions] == [(1, False), (1, False)]
        assert client.run(run).status().in_doubt == ()  # nothing of it was durable: nothing to report
    finally:
        reader.close()
        client.close()
