"""Erasure by crypto-shredding against the real Kafka, registry and chDB: a real worker subprocess,
the real `agentlog erase` and `agentlog sink`. The erased run's marker -- in its input, a tool
argument and a model message, and a result stored out of line -- is in no topic's raw bytes and in
no table of the store, while its structure, hashes and tokens remain; a running run refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.records.sealed_form import ERASED
from runtime.log.sealing.keys import KeyStore
from support.erasure_apps import COMPLETION_TOKENS, PROMPT_TOKENS
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

MARKER = "MARKER-erase-4c1d9e"
KEPT = "MARKER-kept-88b2f0"
PADDING = " " + "p" * 40_000  # the results go out of line, to the payloads topic


@dataclass
class Erased:
    settings: Settings
    tmp: Path
    run_id: str
    kept_id: str
    before: list[dict[str, object]]
    refusal: str
    key: bytes  # the erased run's data key, as the keys topic held it


def _roll_segments_every(settings: Settings, topic: str, ms: int) -> None:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("segment.ms", str(ms), incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def raw_bytes(settings: Settings, topic: str) -> bytes:
    return b"\n".join(
        (m.value() or b"") + (m.key() or b"")
        for p in range(settings.partitions)
        for m in read_partition(settings, p, topic)
    )


@pytest.fixture(scope="module")
def erased(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Erased]:
    settings = make_deployment(services, partitions=2).model_copy(update={"seal_contents": True})
    tmp = tmp_path_factory.mktemp("erasure")
    worker = WorkerProcess(settings, "support.erasure_apps:app", "w1", tmp / "worker.log")
    try:
        worker.wait_ready(2)
        with Client(settings) as client:
            run_id = client.submit("intake", {"note": MARKER + PADDING}).run_id
            kept_id = client.submit("intake", {"note": KEPT}).run_id
            waiting = client.submit("intake", {"note": MARKER, "wait": True}).run_id
            assert client.run(run_id).result(timeout=60)["filed"] == MARKER + PADDING
            assert client.run(kept_id).result(timeout=60)["filed"] == KEPT
            wait_until(
                lambda: client.run(waiting).status().status == "running", 30, "the waiting run running"
            )
            before = client.run(run_id).history(payloads=True)
        key = next(
            m.value() or b""
            for p in range(settings.partitions)
            for m in read_partition(settings, p, settings.keys_topic)
            if m.key() == run_id.encode()
        )
        refused = agentlog(settings, "erase", "--run", waiting)
        assert refused.returncode != 0
        done = agentlog(settings, "erase", "--run", run_id)
        assert done.returncode == 0, done.stderr + done.stdout
        with Client(settings) as client:  # the waiting run goes on, under its key, to its end
            client.run(waiting).signal("go", None)
            assert client.run(waiting).result(timeout=60)["filed"] == MARKER
        assert agentlog(settings, "erase", "--run", waiting).returncode == 0
    finally:
        worker.stop()
    yield Erased(settings, tmp, run_id, kept_id, before, refused.stderr, key)


def test_a_running_run_refuses_erasure_naming_it_and_its_status(erased: Erased) -> None:
    assert "is running: only a run that has ended can be erased" in erased.refusal
    assert erased.refusal.startswith("agentlog: run ")


def test_the_erased_text_is_in_no_topic(erased: Erased) -> None:
    s = erased.settings
    for topic in (s.commands_topic, s.events_topic, s.payloads_topic, s.checkpoints_topic, s.keys_topic):
        data = raw_bytes(s, topic)
        assert MARKER.encode() not in data, topic
        assert KEPT.encode() not in data, topic  # ciphertext from the start, erased or not
    assert b"sealed:v1:" in raw_bytes(s, s.payloads_topic)


def test_the_erased_run_reads_erased_with_its_structure_and_tokens(erased: Erased) -> None:
    with Client(erased.settings) as client:
        after = client.run(erased.run_id).history(payloads=True)
        assert MARKER not in json.dumps(after)
        assert [(e["seq"], e["type"]) for e in after] == [(e["seq"], e["type"]) for e in erased.before]
        assert [e.get("args_hash") for e in after] == [e.get("args_hash") for e in erased.before]
        model = next(e for e in after if e["type"] == "ModelCallCompleted")
        assert (model["input_tokens"], model["output_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
        assert model["result"] == ERASED
        status = client.run(erased.run_id).status()
        assert (status.status, status.result) == ("completed", "erased")
        assert KEPT in json.dumps(client.run(erased.kept_id).history())
    shown = agentlog(erased.settings, "history", erased.run_id)
    assert shown.returncode == 0, shown.stderr
    assert MARKER not in shown.stdout and "erased" in shown.stdout


def test_the_erased_text_is_in_no_table_of_the_store(erased: Erased) -> None:
    dsn = f"chdb://{erased.tmp}/store"
    sink = SinkProcess(erased.settings, dsn, erased.tmp / "sink.log")
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(erased.settings).values())
        wait_for_rows(dsn, erased.settings.events_topic, total, proc=sink.proc)
    finally:
        assert sink.stop() == 0, sink.log_tail()
    tables = query(
        dsn,
        "SELECT database, name FROM system.tables WHERE database = 'agentlog' AND engine NOT LIKE '%View%'",
    ).rows
    assert len(tables) > 3
    for database, name in tables:
        rows = query(dsn, f"SELECT * FROM `{database}`.`{name}`").rows
        assert MARKER not in repr(rows), name
    tokens = query(
        dsn,
        "SELECT sum(input_tokens), sum(output_tokens) FROM agentlog.events WHERE run_id = {r:String}",
        {"r": erased.run_id},
    ).rows[0]
    assert tuple(int(t) for t in tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)


def test_the_erased_key_leaves_the_keys_topic_once_compacted(erased: Erased) -> None:
    """The tombstone's work: the key's bytes are gone from the topic once its segment rolls and the
    log cleaner runs. A record appended now and then rolls the segment, as a deployment's traffic
    does. The deployment rolls every 60 s (infra.topics); this test's topic every 2 s, so the wait
    is the cleaner's, not a minute of the clock."""
    s = erased.settings
    assert len(erased.key) == 32
    _roll_segments_every(s, s.keys_topic, ms=2000)
    log = KafkaLog(s)  # its writer's delivery thread keeps it, and its producer, open until closed
    keys = KeyStore(log, s.keys_topic, s.partitions)
    fillers = iter(range(1000))
    try:
        wait_until(
            lambda: (
                keys.sealing_key(f"filler-{next(fillers)}") and erased.key not in raw_bytes(s, s.keys_topic)
            ),
            240,
            "the erased run's key compacted out of the keys topic",
            interval=3,  # each poll appends a filler and reads the segment files
        )
    finally:
        keys.close()
        log.close()
    with Client(s) as client:  # the ended run still reads, as erased, with the key gone from disk
        assert client.run(erased.run_id).status().result == "erased"
