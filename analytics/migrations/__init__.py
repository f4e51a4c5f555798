"""Versioned, idempotent DDL for the analytics store.

Each migration is released once, as a file of SQL (:mod:`.released`), and applied once per store
by :mod:`.runner`, which records its checksum in ``agentlog.schema_migrations`` and refuses a
store whose ledger disagrees with the code.

Field columns for schemas released after a migration was written are added by the sink when it
first meets the writer schema (``consumers.columns``: a *derived* migration, also idempotent); the
views only name columns the migrations create.
"""

from __future__ import annotations

from .migration import Migration
from .released import RELEASED
from .runner import MigrationError, applied_versions, migrate, pending, table_columns

# The released migrations, in version order, under the name `analytics` exports them by.
MIGRATIONS_LIST = RELEASED

__all__ = [
    "MIGRATIONS_LIST",
    "RELEASED",
    "Migration",
    "MigrationError",
    "applied_versions",
    "migrate",
    "pending",
    "table_columns",
]
