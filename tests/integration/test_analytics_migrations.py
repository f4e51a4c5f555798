"""Versioned, idempotent migrations on a real chDB store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics.migrations import MIGRATIONS_LIST, Migration, MigrationError, migrate, pending, table_columns
from analytics.store import open_client, parse_dsn

pytestmark = pytest.mark.integration


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    chdb = open_client(parse_dsn(f"chdb://{tmp_path / 'analytics'}"))
    yield chdb
    chdb.close()


def test_migrations_apply_once_in_order_and_are_recorded(client: Any) -> None:
    assert [m.version for m in pending(client)] == [m.version for m in MIGRATIONS_LIST]
    applied = migrate(client)
    assert [m.version for m in applied] == [m.version for m in MIGRATIONS_LIST]
    assert migrate(client) == []  # idempotent
    assert pending(client) == []
    ledger = client.query(
        "SELECT version, name, checksum FROM agentlog.schema_migrations FINAL ORDER BY version"
    ).result_rows
    assert [(v, n, c) for v, n, c in ledger] == [(m.version, m.name, m.checksum) for m in MIGRATIONS_LIST]
    tables = {
        r[0] for r in client.query("SELECT name FROM system.tables WHERE database = 'agentlog'").result_rows
    }
    assert {
        "events",
        "writer_schemas",
        "runs",
        "model_calls",
        "tool_calls",
        "divergences",
        "history_size",
    } <= tables
    columns = table_columns(client)
    assert list(columns)[:3] == ["topic", "partition", "offset"]
    assert columns["occurred_at"] == "DateTime64(3, 'UTC')"


def test_a_new_migration_is_applied_on_top(client: Any) -> None:
    migrate(client)
    extra = Migration(
        len(MIGRATIONS_LIST) + 1,
        "a materialized helper",
        ("CREATE TABLE IF NOT EXISTS agentlog.helper (x Int32) ENGINE = MergeTree ORDER BY x",),
    )
    assert migrate(client, (*MIGRATIONS_LIST, extra)) == [extra]
    assert migrate(client, (*MIGRATIONS_LIST, extra)) == []


def test_a_store_migrated_by_an_earlier_release_upgrades(client: Any) -> None:
    """A store that applied migrations 1-10 holds the checksums their releases recorded; the
    current code accepts them and applies 11 onwards."""
    migrate(client, MIGRATIONS_LIST[:10])
    ledger = dict(client.query("SELECT version, checksum FROM agentlog.schema_migrations FINAL").result_rows)
    assert ledger == {
        1: "2c82ec9c43155109",
        2: "31be787fd23b89e9",
        3: "e3c4aa44972468c9",
        4: "3bb06f3eb19d0dec",
        5: "c453cd1850e6c270",
        6: "75e67e539343b00f",
        7: "054d6e33d8dbf346",
        8: "5ccee703f36fc8a6",
        9: "9af335b60a50ddbb",
        10: "ef3c7a101d4a7084",
    }
    assert [m.version for m in migrate(client)] == list(range(11, len(MIGRATIONS_LIST) + 1))
    assert migrate(client) == []


def test_an_applied_migration_that_was_edited_is_refused(client: Any) -> None:
    migrate(client)
    first = MIGRATIONS_LIST[0]
    edited = Migration(first.version, first.name, (*first.statements, "SELECT 1"))
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(client, (edited, *MIGRATIONS_LIST[1:]))


def test_views_answer_on_an_empty_store(client: Any) -> None:
    migrate(client)
    for view in ("runs", "model_calls", "tool_calls", "divergences"):
        assert client.query(f"SELECT count() FROM agentlog.{view}").result_rows == [(0,)]
    sizes = client.query(
        "SELECT count() FROM agentlog.history_size(warn_events = 1, warn_bytes = 1, limit_events = 2, limit_bytes = 2)"
    ).result_rows
    assert sizes == [(0,)]
