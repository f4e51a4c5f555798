"""The analytics store: its migrations, the audit questions, and how a reader reaches it.

``connect(dsn)`` gives a read-only ``QueryStore`` -- a ClickHouse server directly, or an embedded
chDB store either opened in-process or through the running sink's query port (see
``analytics.store`` for the one-process rule). The ``audit`` module holds the questions
``agentlog audit`` asks; ``migrate`` brings a store's schema up to date.
"""

from __future__ import annotations

from . import audit
from .errors import StoreBusyError, StoreError
from .migrations import MIGRATIONS_LIST, Migration, MigrationError, migrate, pending
from .results import QueryResult
from .store import QueryStore, StoreLocation, connect, open_client, parse_dsn

__all__ = [
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
