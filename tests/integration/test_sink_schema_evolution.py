"""Schema evolution in the sink: records of v1 and v2 of one type both land; v2's new field gets a column."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema

from analytics import audit
from analytics.store import connect
from runtime.config import Settings
from runtime.log.records import events as ev
from runtime.log.schemas.catalog import load_catalog
from runtime.log.schemas.datum import record_to_dict
from runtime.log.schemas.frame import frame_header
from runtime.log.schemas.registry import registry_client
from support.sink import EventLog, InProcessSink, RunWriter, make_deployment, query, wait_for_rows

pytestmark = pytest.mark.integration


def _register_v2(settings: Settings) -> tuple[int, dict[str, object]]:
    """ToolCallScheduled v2 = v1 + an optional ``tenant``, registered under this test's topic only."""
    local = load_catalog()["ToolCallScheduled"]
    v2 = json.loads(local.text)
    v2["fields"].append(
        {"name": "tenant", "type": ["null", "string"], "default": None, "doc": "Billing tenant."}
    )
    client = registry_client(settings)
    schema_id = client.register_schema(local.subject(settings), Schema(json.dumps(v2), "AVRO"))
    return int(schema_id), v2


def _encode(schema_id: int, schema: dict[str, object], values: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), values)
    return frame_header(schema_id) + out.getvalue()


def test_v1_and_v2_records_both_land_and_the_new_field_becomes_a_column(
    services: Settings, tmp_path: Path
) -> None:
    settings = make_deployment(services, partitions=2)
    dsn = f"chdb://{tmp_path / 'analytics'}"
    log = EventLog(settings)
    old = RunWriter("run-v1")
    log.append([old.started(), *old.tool_call(1)])
    v2_id, v2 = _register_v2(settings)
    new = RunWriter("run-v2")
    log.append([new.started()])
    partition = log.partition("run-v2")
    for position in (1, 2):
        record = new.next(
            ev.ToolCallScheduled,
            position=position,
            tool="refund",
            args_hash="h",
            args="{}",
            effect=True,
            idempotency_key=f"k{position}",
        )
        scheduled = record_to_dict(record)
        log.append_raw(_encode(v2_id, v2, {**scheduled, "tenant": f"acme-{position}"}), partition, b"run-v2")
    log.append([new.completed()])
    with InProcessSink(settings, dsn):
        wait_for_rows(dsn, settings.events_topic, 7)

    columns = dict(
        query(
            dsn, "SELECT name, type FROM system.columns WHERE database = 'agentlog' AND table = 'events'"
        ).rows
    )
    assert columns["tenant"] == "Nullable(String)"  # added by the derived migration
    comment = query(
        dsn,
        "SELECT comment FROM system.columns WHERE database = 'agentlog' AND table = 'events' "
        "AND name = 'schema_version'",
    ).rows
    assert "registry version of the writer schema" in comment[0][0]  # migration 9
    rows = query(
        dsn,
        "SELECT run_id, schema_id, schema_version, tenant FROM agentlog.events "
        "WHERE type = 'ToolCallScheduled' ORDER BY run_id, seq",
    ).rows
    v1_id = rows[0][1]
    assert v1_id != v2_id
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("run-v1", v1_id, 1, None),
        ("run-v2", v2_id, 2, "acme-1"),
        ("run-v2", v2_id, 2, "acme-2"),
    ]
    assert query(dsn, "SELECT count() FROM agentlog.events WHERE type = 'ToolCallCompleted'").rows == [[1]]
    fields: dict[Any, Any] = dict(
        query(dsn, "SELECT schema_id, fields FROM agentlog.writer_schemas FINAL").rows
    )
    assert "tenant" in fields[v2_id] and "tenant" not in fields[v1_id]

    with connect(dsn) as store:
        v2_events = audit.run_events(store, "run-v2", settings.events_topic)
        v1_events = audit.run_events(store, "run-v1", settings.events_topic)
    assert [e.get("tenant") for e in v2_events if e["type"] == "ToolCallScheduled"] == ["acme-1", "acme-2"]
    assert all("tenant" not in e for e in v1_events)  # a v1 record has no such field, not a null one

    # A restarted sink finds the column in place: the derived migration is idempotent.
    log.append_raw(_encode(v2_id, v2, {**scheduled, "seq": 99, "tenant": "acme-3"}), partition, b"run-v2")
    with InProcessSink(settings, dsn):
        wait_for_rows(dsn, settings.events_topic, 8)
    assert query(dsn, "SELECT tenant FROM agentlog.events WHERE seq = 99").rows == [["acme-3"]]
