"""Applying migrations, and the ledger that says which ones a store has.

``migrate`` applies the migrations a store lacks in version order and records each in
``agentlog.schema_migrations`` with its checksum. A checksum that no longer matches the ledger
raises: the store would otherwise silently differ from what the code believes. Every statement is
itself idempotent (``IF NOT EXISTS``, ``CREATE OR REPLACE VIEW``), so a crash between a statement
and its ledger row only repeats harmless work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from analytics.tables import DATABASE, EVENTS, MIGRATIONS
from runtime.errors import TerminalError

from .migration import Migration
from .released import RELEASED

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client


class MigrationError(TerminalError):
    """The store's migration ledger disagrees with the code (an applied migration was edited)."""


_LEDGER = f"""CREATE TABLE IF NOT EXISTS {MIGRATIONS} (
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY version"""


def applied_versions(client: Client) -> dict[int, str]:
    """Version -> checksum of every migration recorded in the store."""
    rows = client.query(
        f"SELECT version, argMax(checksum, applied_at) FROM {MIGRATIONS} GROUP BY version"
    ).result_rows
    return {int(version): str(checksum) for version, checksum in rows}


def migrate(client: Client, migrations: Sequence[Migration] = RELEASED) -> list[Migration]:
    """Apply the migrations the store lacks, in version order; return those applied."""
    client.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    client.command(_LEDGER)
    done = applied_versions(client)
    applied: list[Migration] = []
    for migration in sorted(migrations, key=lambda m: m.version):
        recorded = done.get(migration.version)
        if recorded is not None:
            if recorded != migration.checksum:
                raise MigrationError(
                    f"migration {migration.version} ({migration.name}) was changed after it was applied "
                    f"(store checksum {recorded}, code {migration.checksum}); add a new migration instead"
                )
            continue
        for statement in migration.statements:
            client.command(statement)
        client.command(
            f"INSERT INTO {MIGRATIONS} (version, name, checksum) VALUES "
            "({version:UInt32}, {name:String}, {checksum:String})",
            parameters={"version": migration.version, "name": migration.name, "checksum": migration.checksum},
        )
        applied.append(migration)
    return applied


def pending(client: Client, migrations: Sequence[Migration] = RELEASED) -> list[Migration]:
    """Migrations the store has not applied."""
    from clickhouse_connect.driver.exceptions import DatabaseError  # late: keeps `agentlog --help` fast

    try:
        done = applied_versions(client)
    except DatabaseError:  # no ledger yet: nothing applied
        return list(migrations)
    return [m for m in migrations if m.version not in done]


def table_columns(client: Client, table: str = EVENTS) -> dict[str, str]:
    """Column name -> type of ``table`` (``database.table``), as the migrations and the sink left it."""
    database, name = table.split(".", 1)
    rows = client.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String} ORDER BY position",
        parameters={"db": database, "t": name},
    ).result_rows
    return {str(n): str(t) for n, t in rows}
