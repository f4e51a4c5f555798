"""The local stack (infra/): up is idempotent, down leaves nothing behind, data survives restarts.

These tests run their own stack -- a separate state folder and separate ports -- so they never
disturb the services on the default ports that the other integration tests use.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # the public name is not in __all__
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from infra import postgres, process, stack
from infra.errors import ServiceError
from runtime.config import Settings, load_settings

pytestmark = [pytest.mark.integration]

KAFKA_PORT = 19092
KAFKA_CONTROLLER_PORT = 19093
REGISTRY_PORT = 18081
POSTGRES_PORT = 25432
PARTITIONS = 3
ALL_PORTS = (KAFKA_PORT, KAFKA_CONTROLLER_PORT, REGISTRY_PORT, POSTGRES_PORT)


def _settings(state: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "state_dir": state,
        "kafka_port": KAFKA_PORT,
        "kafka_controller_port": KAFKA_CONTROLLER_PORT,
        "registry_port": REGISTRY_PORT,
        "postgres_port": POSTGRES_PORT,
        "bootstrap_servers": f"127.0.0.1:{KAFKA_PORT}",
        "schema_registry_url": f"http://127.0.0.1:{REGISTRY_PORT}",
        "partitions": PARTITIONS,
    }
    values.update(overrides)
    return load_settings(**values)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A private stack for this module: brought up once, taken down (and its files removed) at the end."""
    busy = [port for port in ALL_PORTS if process.port_open("127.0.0.1", port)]
    if busy:
        pytest.fail(
            f"ports {busy} are in use: a stack of an earlier, aborted run of this file may still be up"
        )
    cfg = _settings(tmp_path_factory.mktemp("infra-stack"))
    try:
        stack.up(cfg)
        yield cfg
    finally:
        stack.down(cfg)
        shutil.rmtree(postgres.fallback_dir(cfg), ignore_errors=True)


def _pids(services: list[stack.ServiceInfo]) -> dict[str, int | None]:
    return {s.name: s.pid for s in services}


@pytest.mark.timeout(600)
def test_up_twice_is_idempotent(settings: Settings) -> None:
    first = stack.up(settings)
    assert [s.name for s in first] == ["postgresql", "schema-registry", "kafka"]
    assert all(s.running and s.pid is not None for s in first), first
    messages: list[str] = []
    second = stack.up(settings, messages.append)
    assert _pids(second) == _pids(first)
    assert not [m for m in messages if m.startswith("starting")], messages
    assert _pids(stack.status(settings)) == _pids(first)
    for service in first:
        assert service.log_path.is_file(), service


@pytest.mark.timeout(600)
def test_postgres_data_is_reachable_by_the_postgres_user(settings: Settings) -> None:
    stack.up(settings)
    home = postgres.home_dir(settings)
    check = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(home)], check=False)
    assert check.returncode == 0, f"the postgres user cannot reach {home}"
    reach_state = subprocess.run(
        ["runuser", "-u", "postgres", "--", "test", "-x", str(settings.state_dir)], check=False
    )
    if reach_state.returncode != 0:  # pytest's tmp folders are 0700: the cluster lives under /var/tmp
        assert (settings.state_dir / "postgres").is_symlink()
        assert home == postgres.fallback_dir(settings)


@pytest.mark.timeout(600)
def test_topics_have_the_configured_partitions_and_a_mismatch_is_refused(settings: Settings) -> None:
    stack.up(settings)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    meta = admin.list_topics(timeout=30)
    for name in (settings.commands_topic, settings.events_topic, settings.checkpoints_topic):
        assert len(meta.topics[name].partitions) == PARTITIONS, name
    resources = [
        ConfigResource("topic", settings.events_topic),
        ConfigResource("topic", settings.checkpoints_topic),
    ]
    events, checkpoints = (future.result() for future in admin.describe_configs(resources).values())
    assert events["retention.ms"].value == "-1"
    assert checkpoints["cleanup.policy"].value == "compact"

    with pytest.raises(ServiceError, match=r"partitions") as caught:
        stack.up(_settings(settings.state_dir, partitions=PARTITIONS + 1))
    assert settings.events_topic in str(caught.value)


@pytest.mark.chaos
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
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            records.append((bytes(msg.key() or b"").decode(), bytes(msg.value() or b"").decode()))
        return records
    finally:
        consumer.close()


@pytest.mark.chaos
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


@pytest.mark.chaos
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


def test_service_error_names_the_service_the_reason_and_the_log(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)))
    with pytest.raises(ServiceError) as caught:
        process.wait_for_port("svc", "127.0.0.1", 1, timeout=0.3, log_path=log)
    message = str(caught.value)
    assert message.startswith("svc: timed out")
    assert str(log) in message
    assert "line 39" in message and "line 20" in message and "line 19\n" not in message
