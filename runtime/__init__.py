"""agentlog: a durable runtime for AI-agent runs whose source of truth is a Kafka log."""

import logging as _logging
import warnings as _warnings

# confluent-kafka's registry client imports authlib's httpx integration, which warns on import
# (about authlib's own packaging, nothing agentlog does); import it once with warnings muted.
with _warnings.catch_warnings():
    import authlib.deprecate  # type: ignore[import-untyped]  # noqa: F401 - installs an "always" filter; ours goes after

    _warnings.simplefilter("ignore")
    import confluent_kafka.schema_registry.avro  # noqa: F401
_logging.getLogger("httpx").setLevel(_logging.WARNING)

from .app import App, RetryPolicy
from .client import Client, RunError
from .config import ConfigError, Settings, load_settings
from .context import Context
from .errors import AgentlogError, RetryableError, TerminalError
from .machine import CallFailed, NonDeterminismError
from .replayer import Replayer

__all__ = [
    "AgentlogError",
    "App",
    "CallFailed",
    "Client",
    "ConfigError",
    "Context",
    "NonDeterminismError",
    "Replayer",
    "RetryPolicy",
    "RetryableError",
    "RunError",
    "Settings",
    "TerminalError",
    "load_settings",
]
