"""A 600 KiB model message, through Kafka and the analytics store: stored once out of line, in the
payloads topic, and back whole in the ``model_calls`` view, ``agentlog audit call`` and
``agentlog history --payloads`` (a real worker subprocess, the sink into chDB, the real CLI)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.contract_app import CONTRACT, SYSTEM, transcript
from support.sink import (
    SinkProcess,
    agentlog,
    kafka_offsets,
    make_deployment,
    query,
    read_partition,
    wait_for_rows,
)
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration


@dataclass
class Recorded:
    settings: Settings
    dsn: str
    run_id: str
    fork_id: str


@pytest.fixture(scope="module")
def recorded(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    settings = make_deployment(services, partitions=2)
    tmp = tmp_path_factory.mktemp("large-messages")
    worker = WorkerProcess(settings, "support.contract_app:app", "w1", tmp / "worker.log")
    try:
        worker.wait_ready(1)
        with Client(settings) as client:
            run_id = client.submit("review", {}).run_id
            assert client.run(run_id).result(timeout=60) == 4
            # The fork copies the first call's record, pointer included, into a run of another partition.
            fork_id = next(
                f"fork-{i}"
                for i in range(100)
                if client.run(f"fork-{i}").partition != client.run(run_id).partition
            )
            assert client.run(run_id).fork(2, {"prompt_version": "v2"}, new_id=fork_id).run_id == fork_id
            assert client.run(fork_id).result(timeout=60) == 4
    finally:
        worker.stop()
    dsn = f"chdb://{tmp}/store"
    sink = SinkProcess(settings, dsn, tmp / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
        wait_until(
            lambda: query(dsn, "SELECT count() FROM agentlog.payloads").rows[0][0] >= 1,
            60,
            "the stored message copied into the store",
            process=sink.proc,
        )
    finally:
        assert sink.stop() == 0, sink.log_tail()
    yield Recorded(settings, dsn, run_id, fork_id)


def test_the_message_is_stored_once_out_of_line_and_the_events_stay_small(recorded: Recorded) -> None:
    settings = recorded.settings
    blobs = [m.value() for p in (0, 1) for m in read_partition(settings, p, settings.payloads_topic)]
    assert len(blobs) == 1 and json.loads(blobs[0] or b"") == CONTRACT, "stored once, the fork included"
    events = [m.value() or b"" for p in (0, 1) for m in read_partition(settings, p, settings.events_topic)]
    assert max(len(v) for v in events) < 4_096, "no event carries the contract"


def test_the_model_calls_view_holds_the_whole_prompt(recorded: Recorded) -> None:
    for run_id in (recorded.run_id, recorded.fork_id):
        rows = query(
            recorded.dsn,
            "SELECT position, messages FROM agentlog.model_calls WHERE run_id = {r:String} ORDER BY position",
            {"r": run_id},
        ).rows
        assert [(p, json.loads(m)) for p, m in rows] == [(1, [SYSTEM, CONTRACT]), (2, transcript())], run_id


def test_audit_call_shows_the_message_verified_by_its_hash(recorded: Recorded) -> None:
    done = agentlog(recorded.settings, "audit", "call", recorded.run_id, "2", "--dsn", recorded.dsn, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    found = json.loads(done.stdout)
    assert found["messages"] == transcript() and found["verified"] is True


def test_history_with_payloads_rebuilds_each_prompt(recorded: Recorded) -> None:
    for run_id in (recorded.run_id, recorded.fork_id):
        done = agentlog(recorded.settings, "history", run_id, "--payloads", "--json")
        assert done.returncode == 0, done.stderr
        prompts = [e["messages"] for e in json.loads(done.stdout) if e["type"] == "ModelCallScheduled"]
        assert prompts == [[SYSTEM, CONTRACT], transcript()], run_id
