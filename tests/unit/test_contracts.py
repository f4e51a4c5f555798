"""Pure-logic contracts: schemas vs typed records, configuration, keys, partitioning, compat."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from runtime.config import ConfigError, load_settings
from runtime.log.port.partitioning import murmur2, partition_for
from runtime.log.records.events import CHECKPOINT_TYPES, COMMAND_TYPES, EVENT_TYPES, RECORD_TYPES
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, load_catalog
from runtime.log.schemas.diff import breaking_fields, field_changes
from runtime.workflow.canonical import args_hash, canonical_json, idempotency_key
from runtime.workflow.input_shape import shape_error

pytestmark = pytest.mark.unit


def test_every_schema_has_a_typed_record_with_the_same_fields() -> None:
    catalog = load_catalog()
    assert set(catalog) == set(RECORD_TYPES)
    for name, schema in catalog.items():
        avro_fields = [f["name"] for f in schema.parsed["fields"]]
        record_fields = [f.name for f in dataclasses.fields(RECORD_TYPES[name])]
        # run_id is the Kafka key and schema_version the writer schema's registry version (from
        # the frame's schema id): neither is part of the Avro value, both are filled on decode
        assert sorted(avro_fields) == sorted(
            f for f in record_fields if f not in ("run_id", "schema_version")
        ), name
        assert avro_fields[:4] == ["seq", "occurred_at", "worker", "epoch"], name


def test_records_compare_and_hash_by_value_and_hold_no_instance_dict() -> None:
    from runtime.log.records.events import RunStarted

    one = RunStarted(run_id="r", workflow="w", input="{}", command_offset=3)
    same = RunStarted(run_id="r", workflow="w", input="{}", command_offset=3)
    other = dataclasses.replace(one, command_offset=4)
    assert one == same and hash(one) == hash(same) and len({one, same, other}) == 2
    assert not hasattr(one, "__dict__")  # slots: a rebuild holds millions of them


def test_commands_and_events_are_in_their_topics_namespaces() -> None:
    catalog = load_catalog()
    assert {catalog[c.__name__].role for c in COMMAND_TYPES} == {"commands"}
    assert {catalog[e.__name__].role for e in EVENT_TYPES} == {"events"}
    assert {catalog[c.__name__].role for c in CHECKPOINT_TYPES} == {"checkpoints"}
    required = {
        "RunSubmitted",
        "RunRejected",
        "RunStarted",
        "ModelCallScheduled",
        "ModelCallCompleted",
        "ModelCallFailed",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "ToolCallFailed",
        "TimerScheduled",
        "TimerFired",
        "SignalReceived",
        "PatchRecorded",
        "Redecided",
        "NonDeterminismDetected",
        "RunParked",
        "RunCompleted",
        "RunFailed",
        "RunCancelled",
        "RunContinuedAsNew",
        "CancelRequested",
        "SignalSent",
    }
    assert required <= set(catalog)
    policy = json.loads((DEFAULT_SCHEMA_DIR / "policy.json").read_text())
    assert policy["compatibility"] == "FULL_TRANSITIVE"
    assert policy["subject_name_strategy"] == "TopicRecordNameStrategy"


def test_unknown_configuration_key_is_rejected_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="bootstrap_severs"):
        load_settings(bootstrap_severs="x:1")
    monkeypatch.setenv("AGENTLOG_BOOTSTRAP_SEVERS", "x:1")
    with pytest.raises(ConfigError, match="AGENTLOG_BOOTSTRAP_SEVERS"):
        load_settings()


def test_environment_and_overrides_set_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOG_PARTITIONS", "7")
    assert load_settings().partitions == 7
    assert load_settings(partitions=5).partitions == 5
    with pytest.raises(ConfigError, match="partitions"):
        load_settings(partitions=0)


def test_environment_values_are_typed_and_a_mapping_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("agentlog_model_timeout_s", "2.5")  # the name in any case, as before
    monkeypatch.setenv("AGENTLOG_KAFKA", '{"security.protocol": "SSL"}')
    settings = load_settings()
    assert settings.model_timeout_s == 2.5
    assert settings.kafka == {"security.protocol": "SSL"}
    monkeypatch.setenv("AGENTLOG_KAFKA", "security.protocol=SSL")
    with pytest.raises(ConfigError, match="AGENTLOG_KAFKA must be a JSON object"):
        load_settings()
    monkeypatch.setenv("AGENTLOG_KAFKA", '{"enable.idempotence": "false"}')
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        load_settings()


def test_only_security_settings_pass_through_to_librdkafka() -> None:
    settings = load_settings(kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    assert settings.kafka_common()["sasl.mechanism"] == "PLAIN"
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        load_settings(kafka={"enable.idempotence": "false"})


def test_a_kafka_password_shows_in_no_configuration_error_and_no_repr() -> None:
    with pytest.raises(ConfigError, match=r"bogus\.key") as refused:
        load_settings(kafka={"sasl.password": "hunter2-secret", "bogus.key": "x"})
    assert "hunter2-secret" not in str(refused.value)
    settings = load_settings(kafka={"sasl.username": "agent", "sasl.password": "hunter2-secret"})
    assert "hunter2-secret" not in repr(settings) + str(settings)


def test_idempotency_key_depends_on_run_tool_args_and_count_not_on_anything_else() -> None:
    key = idempotency_key("run-1", "refund", {"order": "48211", "amount": 41.6}, 0)
    assert key == idempotency_key("run-1", "refund", {"amount": 41.6, "order": "48211"}, 0)
    assert uuid.UUID(key).version == 5
    assert key != idempotency_key("run-2", "refund", {"order": "48211", "amount": 41.6}, 0)
    assert key != idempotency_key("run-1", "refund", {"order": "48211", "amount": 41.6}, 1)
    assert args_hash("tool", "a", {"x": 1}) != args_hash("tool", "a", {"x": 2})
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


def test_murmur2_matches_kafka_java_client_vectors() -> None:
    def signed(x: int) -> int:
        return x - 2**32 if x >= 2**31 else x

    assert signed(murmur2(b"21")) == -973932308
    assert signed(murmur2(b"foobar")) == -790332482
    assert signed(murmur2(b"a-little-bit-long-string")) == -985981536
    assert 0 <= partition_for("any-run", 12) < 12


def test_field_changes_name_the_breaking_field() -> None:
    old = {"fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "long"}]}
    added_optional = {"fields": [*old["fields"], {"name": "c", "type": ["null", "string"], "default": None}]}
    assert breaking_fields(old, added_optional) == []
    assert field_changes(old, added_optional) == ["field 'c' added ([null, string], with default)"]
    retyped = {"fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "long"}]}
    assert breaking_fields(old, retyped) == ["field 'a' changed type string -> int"]
    removed = {"fields": [{"name": "a", "type": "string"}]}
    assert "field 'b' removed without a default" in breaking_fields(old, removed)[0]


def test_input_shape_names_what_was_wrong() -> None:
    assert shape_error(dict, {"order": 1}) is None
    assert shape_error(dict, [1]) == "expected a JSON object, got list"
    assert shape_error(None, [1]) is None
