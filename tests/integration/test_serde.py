"""Every record type through the real registry and Kafka; schema evolution in both directions."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from runtime.cli.main import main as cli_main
from runtime.config import Settings
from runtime.log.kafka.config import reader_config
from runtime.log.records.events import RECORD_TYPES, Record
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, load_catalog
from runtime.log.schemas.datum import record_to_dict, schema_id_of
from runtime.log.schemas.registry_admin import SchemaAdmin
from runtime.log.schemas.serde import Serde
from support.services import ROOT
from support.wait import wait_until

pytestmark = pytest.mark.integration


def sample(cls: type[Record], n: int) -> Record:
    values: dict[str, Any] = {
        "run_id": f"run-{n}",
        "seq": n,
        "occurred_at": 1_700_000_000_000 + n,
        "worker": "w1",
        "epoch": 5,
    }
    for name, field in cls.__dataclass_fields__.items():
        if name in values or name in ("schema_version",):
            continue
        text = str(field.type)
        if "dict" in text:
            values[name] = {"r1": 3, "r2": 9}
        elif text == "list[int]":
            values[name] = [0, 2, 5, 1]
        elif text == "list[bytes]":
            values[name] = [b"\x00\x01", name.encode()]
        elif "list" in text:
            values[name] = [name, json.dumps({"field": name})]
        elif text == "bytes":
            values[name] = b"\x10" + name.encode()
        elif "bool" in text:
            values[name] = True
        elif "int" in text:
            values[name] = 1_700_000_000_123 if name == "fire_at" else 7
        else:
            values[name] = json.dumps({"field": name})
    return cls(**values)


def test_every_record_type_round_trips_through_kafka_and_the_registry(deployment: Settings) -> None:
    serde = Serde(deployment)
    records = [sample(cls, i) for i, cls in enumerate(RECORD_TYPES.values(), start=1)]
    producer = Producer({"bootstrap.servers": deployment.bootstrap_servers, "enable.idempotence": True})
    try:
        for record in records:
            producer.produce(
                serde.topic_of(record), key=record.run_id.encode(), value=serde.encode(record), partition=0
            )
        assert producer.flush(30) == 0
    finally:
        producer.close()

    consumer = Consumer(reader_config(deployment))
    got: list[Record] = []
    try:
        for topic in (
            deployment.commands_topic,
            deployment.events_topic,
            deployment.checkpoints_topic,
            deployment.schedules_topic,
        ):
            wanted = sum(1 for r in records if serde.topic_of(r) == topic)
            got += _read(consumer, serde, topic, wanted)
    finally:
        consumer.close()
    # Each schema is the first version of its subject: the decoded records say so.
    assert sorted(got, key=lambda r: r.seq) == [dataclasses.replace(r, schema_version=1) for r in records]
    assert len(got) == len(RECORD_TYPES) == 36


def _read(consumer: Consumer, serde: Serde, topic: str, wanted: int) -> list[Record]:
    """The first ``wanted`` records of ``topic``'s partition 0, decoded."""
    consumer.assign([TopicPartition(topic, 0, 0)])
    mine: list[Record] = []

    def read_all() -> bool:
        for message in consumer.consume(100, timeout=0.5):
            if message.error() is None:
                mine.append(serde.decode(message.value(), message.key(), topic))
        return len(mine) >= wanted

    wait_until(read_all, 30, f"{wanted} records of {topic}", interval=0)
    return mine


def _v2_dir(tmp_path: Path, mutate: str) -> Path:
    target = tmp_path / f"schemas-{mutate}"
    shutil.copytree(DEFAULT_SCHEMA_DIR, target)
    path = target / "ToolCallCompleted.avsc"
    schema = json.loads(path.read_text())
    if mutate == "add-optional":
        schema["fields"].append(
            {"name": "cost_usd", "type": ["null", "double"], "default": None, "doc": "v2"}
        )
    elif mutate == "type-change":
        for field in schema["fields"]:
            if field["name"] == "result":
                field["type"] = "int"
    elif mutate == "remove-field":
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "result"]
    path.write_text(json.dumps(schema, indent=2))
    return target


def test_added_optional_field_reads_both_ways(deployment: Settings, tmp_path: Path) -> None:
    v2_dir = _v2_dir(tmp_path, "add-optional")
    assert all(r.ok for r in SchemaAdmin(deployment, v2_dir).register())  # the upgrade path
    v2 = load_catalog(v2_dir)["ToolCallCompleted"].text
    serde = Serde(deployment)
    ctx = SerializationContext(deployment.events_topic, MessageField.VALUE)
    record = sample(RECORD_TYPES["ToolCallCompleted"], 3)

    v1_bytes = serde.encode(record)
    read_by_v2 = AvroDeserializer(serde.client, v2)(v1_bytes, ctx)
    assert read_by_v2 is not None and read_by_v2["cost_usd"] is None and read_by_v2["result"] == record.result  # type: ignore[attr-defined]

    v2_writer = AvroSerializer(
        serde.client, v2, conf={"auto.register.schemas": False, "subject.name.strategy": _trns()}
    )
    v2_bytes = v2_writer({**record_to_dict(record), "cost_usd": 0.25}, ctx)
    assert v2_bytes is not None and schema_id_of(v2_bytes) != schema_id_of(v1_bytes)  # a different schema id
    # v1 code reads v2 bytes, the new field dropped; the version is the writer's, not the reader's
    assert serde.decode(v2_bytes, record.run_id.encode()) == dataclasses.replace(record, schema_version=2)
    assert serde.decode(v1_bytes, record.run_id.encode()).schema_version == 1


def _trns() -> Any:
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy

    return topic_record_subject_name_strategy


@pytest.mark.parametrize(("mutate", "field"), [("type-change", "result"), ("remove-field", "result")])
def test_incompatible_change_is_refused_naming_the_field(
    deployment: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mutate: str,
    field: str,
) -> None:
    bad = _v2_dir(tmp_path, mutate)
    monkeypatch.setenv("AGENTLOG_EVENTS_TOPIC", deployment.events_topic)
    monkeypatch.setenv("AGENTLOG_COMMANDS_TOPIC", deployment.commands_topic)
    assert cli_main(["schemas", "check", "--dir", str(bad)]) == 1
    out = capsys.readouterr().out
    subject = f"{deployment.events_topic}-dev.agentlog.events.ToolCallCompleted"
    assert f"error: {subject}: field '{field}'" in out
    assert cli_main(["schemas", "register", "--dir", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "refused" in out and f"field '{field}'" in out
    assert cli_main(["schemas", "check"]) == 0  # the registry still holds only the good versions


def test_warm_up_over_plain_http_finds_the_ids_the_registry_client_finds(deployment: Settings) -> None:
    """A cold worker resolves its schema ids without importing the registry client (its import
    is a quarter of a recovery); the ids must be exactly the client's."""
    import subprocess
    import sys

    from runtime.log.schemas.registry import lookup_ids, registry_client

    catalog = load_catalog(DEFAULT_SCHEMA_DIR)
    wanted = [(schema.subject(deployment), schema.text) for schema in catalog.values()]
    by_http = lookup_ids(deployment.schema_registry_url, [*wanted, ("no-such-subject", '"string"')])
    client = registry_client(deployment)
    by_client = {
        subject: client.lookup_schema(subject, Schema(text, schema_type="AVRO")).schema_id
        for subject, text in wanted
    }
    assert by_http == by_client  # every registered schema, and nothing for the unknown subject

    probe = (
        "import sys; from runtime.config import load_settings; from runtime.log.schemas.serde import Serde; "
        f"s = Serde(load_settings(schema_registry_url={deployment.schema_registry_url!r}, "
        f"commands_topic={deployment.commands_topic!r}, events_topic={deployment.events_topic!r})); "
        "n = s.warm_up(); print(n, len(s.catalog), 'runtime.log.schemas.registry_client' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    resolved, total, imported = done.stdout.split()
    assert resolved == total and imported == "False", done.stdout + done.stderr
