"""The error taxonomy: one root, terminal vs retryable, errors that carry what went wrong."""

from __future__ import annotations


class AgentlogError(Exception):
    """Root of every error agentlog raises on purpose."""


class TerminalError(AgentlogError):
    """Retrying will not help (bad input, a contract broken); record it and move on."""


class RetryableError(AgentlogError):
    """A transient failure; the caller's retry policy decides what happens next."""
