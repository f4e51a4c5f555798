"""The local stack (infra/) stopped and started again: data survives, down leaves nothing behind.

A private stack (its own ports and state folder), as in tests/integration/test_infra.py.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from infra import postgres, process, stack
from runtime.config import Settings
from support.stack import ALL_PORTS, KAFKA_PORT, PARTITIONS, REGISTRY_PORT, private_stack
from support.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A private stack for this module: brought up once, taken down (and its files removed) at the end."""
    with private_stack(tmp_path_factory.mktemp("infra-stack")) as cfg:
        yield cfg


def _consume_all(
    settings: Settings, topic: str, expected: int, timeout: float = 60.0
) -> list[tuple[str, str]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"infra-test-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(settings.partitions)])
        records: list[tuple[str, str]] = []

        def all_read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append((bytes(msg.key() or b"").decode(), bytes(msg.value() or b"").decode()))
            return len(records) >= expected

        wait_until(all_read, timeout, f"{expected} records of {topic}", interval=0)  # poll() is the pause
        return records
    finally:
        consumer.close()


@pytest.mark.timeout(600)
def test_registry_keeps_schemas_across_a_restart_of_registry_and_postgres(settings: Settings) -> None:
    stack.up(settings)
    subject = f"infra-test-{uuid.uuid4().hex[:8]}-value"
    schema = Schema(
        json.dumps({"type": "record", "name": "Probe", "fields": [{"name": "n", "type": "long"}]}),
        "AVRO",
    )
    before = SchemaRegistryClient({"url": settings.schema_registry_url}).register_schema_full_response(
        subject, schema
    )
    assert before.schema_id is not None

    stack.down(settings)
    assert not process.port_open("127.0.0.1", REGISTRY_PORT)
    stack.up(settings)

    client = SchemaRegistryClient({"url": settings.schema_registry_url})  # a new client: no cache
    after = client.lookup_schema(subject, schema)
    assert (after.schema_id, after.version) == (before.schema_id, before.version or 1)
    assert client.get_latest_version(subject).schema_id == before.schema_id
    assert subject in client.get_subjects()


@pytest.mark.timeout(600)
def test_broker_restart_keeps_topics_and_records(settings: Settings) -> None:
    stack.up(settings)
    topic = settings.events_topic
    sent = [(f"run-{i}", f"event-{i}-{uuid.uuid4().hex}") for i in range(10)]
    producer = Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0

    stack.down(settings)
    assert not process.port_open("127.0.0.1", KAFKA_PORT)
    stack.up(settings)

    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "infra-test-meta"})
    try:
        meta = consumer.list_topics(timeout=30)
    finally:
        consumer.close()
    for name in (settings.commands_topic, settings.events_topic, settings.checkpoints_topic):
        assert name in meta.topics
        assert len(meta.topics[name].partitions) == PARTITIONS
    received = _consume_all(settings, topic, expected=len(sent))
    assert sorted(received) == sorted(sent)


@pytest.mark.timeout(600)
def test_down_leaves_no_process_behind(settings: Settings) -> None:
    services = stack.up(settings)
    pids = [s.pid for s in services if s.pid is not None]
    assert len(pids) == 3

    lines = stack.down(settings)
    assert all("stopped" in line for line in lines), lines
    for pid in pids:
        assert not process.pid_alive(pid), f"pid {pid} is still running after down"
    busy = [port for port in ALL_PORTS if process.port_open("127.0.0.1", port)]
    assert not busy, f"ports still open after down: {busy}"
    for folder in (settings.state_dir, postgres.fallback_dir(settings)):
        leftovers = subprocess.run(
            ["pgrep", "-f", str(folder)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert not [p for p in leftovers if process.pid_alive(int(p))], (folder, leftovers)
    assert not any(s.running for s in stack.status(settings))
    assert all("not running" in line for line in stack.down(settings))  # idempotent

    # The stack comes back with the same data (the fixture's teardown then stops it again).
    assert all(s.running for s in stack.up(settings))
