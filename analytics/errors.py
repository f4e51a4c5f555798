"""Errors of reaching the analytics store, below both ways of reaching it (``analytics.store`` opens
it or a server; ``analytics.proxy`` asks the sink that holds it)."""

from __future__ import annotations

from runtime.errors import AgentlogError, RetryableError


class StoreError(AgentlogError):
    """The analytics store cannot be reached or opened; the message says why and what to do."""


class StoreBusyError(StoreError, RetryableError):
    """The embedded store is held by another process that does not answer queries."""
