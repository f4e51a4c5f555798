"""Pure logic of the analytics package: read-only checks, DSNs, the store lock, rendering."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest

from analytics import audit, render
from analytics.errors import StoreError
from analytics.proxy import Endpoint
from analytics.results import QueryResult, json_safe
from analytics.sqlguard import ReadOnlyViolation, check_read_only
from analytics.store import parse_dsn

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "  with x AS (SELECT 1) SELECT * FROM x;",
        "-- why\nSELECT 'a;b' FROM agentlog.events",
        "/* c */ DESCRIBE agentlog.events",
        "SHOW TABLES FROM agentlog",
        "EXPLAIN SELECT 1",
        "(SELECT 1) UNION ALL (SELECT 2)",
    ],
)
def test_read_only_statements_pass(sql: str) -> None:
    assert check_read_only(sql)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("INSERT INTO agentlog.events (run_id) VALUES ('x')", "not INSERT"),
        ("DROP TABLE agentlog.events", "not DROP"),
        ("SELECT 1; DROP TABLE agentlog.events", "one statement"),
        ("ALTER TABLE agentlog.events DELETE WHERE 1", "not ALTER"),
        ("SELECT * FROM agentlog.events INTO OUTFILE '/tmp/x'", "OUTFILE"),
        ("   ", "empty"),
    ],
)
def test_writes_and_multi_statements_are_refused(sql: str, why: str) -> None:
    with pytest.raises(ReadOnlyViolation, match=why):
        check_read_only(sql)


def test_dsns() -> None:
    embedded = parse_dsn("chdb:///var/lib/agentlog/analytics")
    assert embedded.embedded
    assert embedded.lock_path == Path("/var/lib/agentlog/analytics.lock")
    assert embedded.endpoint_path == Path("/var/lib/agentlog/analytics.sink.json")
    assert not parse_dsn("http://clickhouse:8123").embedded
    for bad in ("chdb://memory", "postgres://x", "chdb://"):
        with pytest.raises(StoreError):
            parse_dsn(bad)


def test_endpoint_file_round_trips_and_tolerates_garbage(tmp_path: Path) -> None:
    path = tmp_path / "a.sink.json"
    endpoint = Endpoint("127.0.0.1", 4242, "t0k", 99)
    endpoint.write(path)
    assert Endpoint.read(path) == endpoint
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text("{not json")
    assert Endpoint.read(path) is None
    assert Endpoint.read(tmp_path / "missing") is None


def test_results_are_json_safe_and_round_trip() -> None:
    when = dt.datetime(2025, 1, 2, 3, 4, 5, 678000)
    result = QueryResult.from_rows(
        ["a", "b", "c"], ["DateTime64(3)", "String", "Map"], [[when, b"\xff", {"k": (1, 2)}]]
    )
    assert result.rows == [["2025-01-02T03:04:05.678Z", "ff", {"k": [1, 2]}]]
    assert QueryResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert json_safe(dt.date(2025, 1, 2)) == "2025-01-02"
    assert audit.iso_to_ms("2025-01-02T03:04:05.678Z") == int(
        dt.datetime(2025, 1, 2, 3, 4, 5, 678000, dt.UTC).timestamp() * 1000
    )


def test_since_accepts_durations_and_iso_times() -> None:
    now = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    assert audit.parse_since("15m", now) == now - dt.timedelta(minutes=15)
    assert audit.parse_since("7d", now) == now - dt.timedelta(days=7)
    assert audit.parse_since("2025-05-01T10:00") == dt.datetime(2025, 5, 1, 10, 0, tzinfo=dt.UTC)
    with pytest.raises(audit.AuditError, match="--since"):
        audit.parse_since("yesterday")


def test_timeline_names_outcomes_after_their_scheduled_call() -> None:
    events = [
        {"seq": 1, "type": "RunStarted", "workflow": "refund", "occurred_at": 0, "schema_version": 1},
        {
            "seq": 2,
            "type": "ToolCallScheduled",
            "position": 1,
            "tool": "refund",
            "idempotency_key": "k1",
            "occurred_at": 1000,
        },
        {
            "seq": 3,
            "type": "ToolCallFailed",
            "position": 1,
            "attempt": 1,
            "error": "timeout",
            "occurred_at": 2000,
        },
        {"seq": 4, "type": "ToolCallCompleted", "position": 1, "attempt": 2, "occurred_at": 3000},
    ]
    rows = audit.timeline(events).rows
    assert [(r["kind"], r["name"], r["key"], r["attempt"]) for r in rows] == [
        ("RunStarted", "refund", None, None),
        ("ToolCallScheduled", "refund", "k1", None),
        ("ToolCallFailed", "refund", "k1", 1),
        ("ToolCallCompleted", "refund", "k1", 2),
    ]
    assert rows[1]["time"] == "1970-01-01T00:00:01.000Z"
    assert rows[2]["detail"] == "timeout"


def test_table_rendering_aligns_and_truncates() -> None:
    out = io.StringIO()
    render.table(
        ["a", "long_name"], [{"a": "x" * 100, "long_name": True}, {"a": None, "long_name": [1]}], out
    )
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("a ")
    assert lines[1].endswith("yes") and "…" in lines[1]
    assert lines[2].rstrip().endswith("[1]")
    out = io.StringIO()
    render.table(["a"], [], out)
    assert "(no rows)" in out.getvalue()


def test_the_public_api_of_analytics_and_consumers_does_not_change_by_accident() -> None:
    import analytics
    import consumers

    assert sorted(analytics.__all__) == [
        "MIGRATIONS_LIST",
        "Migration",
        "MigrationError",
        "QueryResult",
        "QueryStore",
        "StoreBusyError",
        "StoreError",
        "StoreLocation",
        "audit",
        "connect",
        "migrate",
        "open_client",
        "parse_dsn",
        "pending",
    ]
    assert sorted(consumers.__all__) == [
        "BackpressureError",
        "DRIVERS",
        "SinkConfig",
        "SinkCore",
        "SinkError",
        "SinkState",
        "SinkStats",
        "SinkWriteError",
        "StoreWriter",
        "WriterSchemas",
        "run_direct",
        "run_sink",
    ]
    for module in (analytics, consumers):
        assert all(hasattr(module, name) for name in module.__all__)
