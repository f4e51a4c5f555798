"""agentlog: a durable runtime for AI-agent runs whose source of truth is a Kafka log.

The public names are imported on first use (PEP 562): ``agentlog worker`` must join its
consumer group before paying for the registry client's imports (see runtime.log.kafka.group).
"""

from __future__ import annotations

import importlib
import logging as _logging
from typing import TYPE_CHECKING, Any

_logging.getLogger("httpx").setLevel(_logging.WARNING)

_EXPORTS = {
    "AgentlogError": "runtime.errors",
    "App": "runtime.workflow.app",
    "Budget": "runtime.workflow.budget",
    "CallFailed": "runtime.errors",
    "ChildRunFailed": "runtime.errors",
    "Client": "runtime.client",
    "ConfigError": "runtime.config",
    "Context": "runtime.workflow.context",
    "DeadlineError": "runtime.workflow.deadlines",
    "DecisionOutOfBounds": "runtime.errors",
    "NonDeterminismError": "runtime.errors",
    "Replayer": "runtime.replay.replayer",
    "RetryLater": "runtime.errors",
    "RetryPolicy": "runtime.workflow.app",
    "RetryableError": "runtime.errors",
    "RunAlreadyEnded": "runtime.client.handle",
    "RunCancelledError": "runtime.workflow.cancellation",
    "RunError": "runtime.client",
    "RunHandle": "runtime.client",
    "RunState": "runtime.log.records.status",
    "RunStatus": "runtime.run_status",
    "InDoubtCall": "runtime.run_status",
    "HeartbeatTimeout": "runtime.worker.heartbeats",
    "heartbeat": "runtime.worker.heartbeats",
    "last_heartbeat": "runtime.worker.heartbeats",
    "run_local": "runtime.local",
    "Settings": "runtime.config",
    "TerminalError": "runtime.errors",
    "cancelled": "runtime.worker.cancellation",
    "load_settings": "runtime.config",
}
__all__ = [
    "AgentlogError",
    "App",
    "Budget",
    "CallFailed",
    "ChildRunFailed",
    "Client",
    "ConfigError",
    "Context",
    "DeadlineError",
    "DecisionOutOfBounds",
    "HeartbeatTimeout",
    "InDoubtCall",
    "NonDeterminismError",
    "Replayer",
    "RetryLater",
    "RetryPolicy",
    "RetryableError",
    "RunAlreadyEnded",
    "RunCancelledError",
    "RunError",
    "RunHandle",
    "RunState",
    "RunStatus",
    "Settings",
    "TerminalError",
    "cancelled",
    "heartbeat",
    "last_heartbeat",
    "load_settings",
    "run_local",
]

if TYPE_CHECKING:
    from runtime.client import Client, RunError, RunHandle
    from runtime.client.handle import RunAlreadyEnded
    from runtime.config import ConfigError, Settings, load_settings
    from runtime.errors import (
        AgentlogError,
        CallFailed,
        ChildRunFailed,
        DecisionOutOfBounds,
        NonDeterminismError,
        RetryableError,
        RetryLater,
        TerminalError,
    )
    from runtime.local import run_local
    from runtime.log.records.status import RunState
    from runtime.replay.replayer import Replayer
    from runtime.run_status import InDoubtCall, RunStatus
    from runtime.worker.cancellation import cancelled
    from runtime.worker.heartbeats import HeartbeatTimeout, heartbeat, last_heartbeat
    from runtime.workflow.app import App, RetryPolicy
    from runtime.workflow.budget import Budget
    from runtime.workflow.cancellation import RunCancelledError
    from runtime.workflow.context import Context
    from runtime.workflow.deadlines import DeadlineError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
