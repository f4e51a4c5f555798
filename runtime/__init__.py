"""agentlog: a durable runtime for AI-agent runs whose source of truth is a Kafka log.

The public names are imported on first use (PEP 562): ``agentlog worker`` must join its
consumer group before paying for the registry client's imports (see runtime.membership).
"""

from __future__ import annotations

import importlib
import logging as _logging
from typing import TYPE_CHECKING, Any

_logging.getLogger("httpx").setLevel(_logging.WARNING)

_EXPORTS = {
    "AgentlogError": ".errors",
    "App": ".app",
    "CallFailed": ".machine",
    "Client": ".client",
    "ConfigError": ".config",
    "Context": ".context",
    "DecisionOutOfBounds": ".machine",
    "NonDeterminismError": ".machine",
    "Replayer": ".replayer",
    "RetryPolicy": ".app",
    "RetryableError": ".errors",
    "RunError": ".client",
    "Settings": ".config",
    "TerminalError": ".errors",
    "load_settings": ".config",
}
__all__ = [
    "AgentlogError",
    "App",
    "CallFailed",
    "Client",
    "ConfigError",
    "Context",
    "DecisionOutOfBounds",
    "NonDeterminismError",
    "Replayer",
    "RetryPolicy",
    "RetryableError",
    "RunError",
    "Settings",
    "TerminalError",
    "load_settings",
]

if TYPE_CHECKING:
    from .app import App, RetryPolicy
    from .client import Client, RunError
    from .config import ConfigError, Settings, load_settings
    from .context import Context
    from .errors import AgentlogError, RetryableError, TerminalError
    from .machine import CallFailed, DecisionOutOfBounds, NonDeterminismError
    from .replayer import Replayer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
