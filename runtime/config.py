"""One settings model for every agentlog process.

Values come from, in rising precedence: defaults, ``AGENTLOG_*`` environment variables,
keyword arguments (the CLI passes its flags this way). Every key is validated when the
settings are built; an unknown key -- a typo such as ``AGENTLOG_BOOTSTRAP_SEVERS`` -- is
rejected with its name instead of being silently ignored.

A frozen dataclass checked field by field (``Settings.__post_init__``), not a pydantic model:
pydantic's import and the model's schema cost a restarted worker ~100-150 ms of CPU before its
first record (bench/recovery.py), for thirty fields of six types. Strings are read as the
environment gives them ("7" for an int, "true"/"false" for a bool), as pydantic's lax mode did.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, get_origin

from runtime.errors import TerminalError

ENV_PREFIX = "AGENTLOG_"

# librdkafka settings a user may pass through (security and client tuning of their cluster).
# Anything else is refused: a misspelt key would otherwise surface as a late, vague librdkafka error.
_PASSTHROUGH_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.dns.lookup", "socket.")


class ConfigError(TerminalError, ValueError):
    """A configuration key or value is wrong; the message names the key. (A ValueError too: callers
    written before the taxonomy catch it as one.)"""


class SecretStr:
    """A string no repr, str or log line shows (``get_secret_value()`` reads it): pydantic's
    ``SecretStr`` interface. A setting given one of pydantic's is taken over as it is."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"SecretStr({str(self)!r})"

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """A setting's type, default and meaning (the settings page: tools/docs_reference.py)."""

    annotation: Any
    description: str
    default: Any = dataclasses.MISSING
    default_factory: Callable[[], Any] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None


def setting(
    *,
    description: str,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    repr: bool = True,
) -> Any:
    """A settings field: its default, its bounds and its description."""
    limits = {"description": description, "ge": ge, "gt": gt, "le": le}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, repr=repr, metadata=limits)
    return dataclasses.field(default=default, repr=repr, metadata=limits)


def _default_state_dir() -> Path:
    """`.agentlog/` in the current directory"""
    return Path.cwd() / ".agentlog"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Configuration of agentlog; each field's description is its meaning (the docs' settings page). Built by
    ``load_settings``, which reads the environment itself. Immutable; ``model_copy(update=...)``
    makes a changed copy, checked as the original was."""

    model_fields: ClassVar[dict[str, FieldInfo]]  # name -> type, default and meaning, in order

    # Each field's description is its meaning on the settings page of the docs
    # (tools/docs_reference.py generates it; a field without one fails tests/unit/test_docs_reference.py).
    state_dir: Path = setting(
        default_factory=_default_state_dir,
        description="The state folder: the local services' data and logs, the schema cache, the embedded "
        "ClickHouse store.",
    )
    bootstrap_servers: str = setting(
        default="127.0.0.1:9092", description="Kafka bootstrap servers, comma-separated host:port."
    )
    schema_registry_url: str = setting(
        default="http://127.0.0.1:8081", description="The schema registry (Confluent REST API)."
    )
    clickhouse_dsn: str = setting(
        default="",
        description="The analytics store: chdb:///path (embedded chDB) or http(s)://host:8123 (a ClickHouse "
        "server); empty means chdb://<state_dir>/analytics.",
    )
    commands_topic: str = setting(
        default="agentlog.commands", description="Submissions, signals and cancellations, keyed by run id."
    )
    events_topic: str = setting(
        default="agentlog.events", description="The journal of every run, keyed by run id, kept forever."
    )
    checkpoints_topic: str = setting(
        default="agentlog.checkpoints",
        description="Compacted: where a rebuild may start, the run index and history snapshots.",
    )
    # Call results larger than this many bytes are stored out of line, in payloads_topic; the
    # event keeps the offset, the size and a sha256, so histories stay small to replay and copy.
    payloads_topic: str = setting(
        default="agentlog.payloads",
        description="Call results and prompt messages too large to keep inline, in the run's partition.",
    )
    keys_topic: str = setting(
        default="agentlog.keys",
        description="Compacted: the data key of each run whose contents are sealed (seal_contents), keyed by "
        "run id in the run's partition; `agentlog erase` writes its tombstone.",
    )
    seal_contents: bool = setting(
        default=False,
        description="Seal run inputs, call arguments, messages, results and signal payloads with AES-GCM under "
        "a per-run data key kept in keys_topic, so `agentlog erase` can make them unreadable (crypto-shredding).",
    )
    payload_inline_limit: int = setting(
        default=16_384,
        ge=0,
        description="A call result over this many bytes goes to payloads_topic; the event keeps its offset, "
        "size and sha256.",
    )
    partitions: int = setting(
        default=12,
        ge=1,
        le=10_000,
        description="Partitions of the commands and events topics (the same count for both).",
    )
    worker_group: str = setting(
        default="agentlog-workers", description="Consumer group of the workers on the commands topic."
    )
    # Ports of the locally started services (``agentlog infra``).
    kafka_port: int = setting(
        default=9092, description="Port of the local Kafka broker (agentlog infra); a 3-node cluster uses 3."
    )
    kafka_controller_port: int = setting(
        default=9093, description="Port of the local KRaft controller (agentlog infra)."
    )
    registry_port: int = setting(
        default=8081, description="Port of the local schema registry (agentlog infra)."
    )
    postgres_port: int = setting(
        default=15432, description="Port of the local PostgreSQL that stores the registry's schemas."
    )
    # librdkafka pass-through settings; they may hold credentials (sasl.password), so no repr shows them.
    kafka: dict[str, str] = setting(
        default_factory=dict,
        repr=False,
        description="librdkafka settings passed to every Kafka client, as a JSON object: security.protocol, "
        "sasl.*, ssl.*, client.dns.lookup, socket.* only.",
    )
    # The OpenAI-compatible model endpoint used by runtime.models.openai.OpenAIChatModel.from_settings.
    model_base_url: str = setting(
        default="https://api.openai.com/v1",
        description="Base URL of the OpenAI-compatible endpoint of runtime.models.openai.OpenAIChatModel.",
    )
    model_api_key: SecretStr = setting(
        default=SecretStr(""), description="API key of that endpoint (never shown in a repr or a log)."
    )
    model_name: str = setting(default="gpt-4o-mini", description="Model name sent to that endpoint.")
    model_timeout_s: float = setting(
        default=60.0, gt=0, description="Seconds before a request to that endpoint times out."
    )
    chain_key: SecretStr = setting(
        default=SecretStr(""),
        repr=False,
        description=(
            "The workers' key of the runs' hash chain (keyed BLAKE2b, runtime.log.records.chain): with it a "
            "worker seals every run record it writes and refuses to replay one that does not verify (the "
            "run is parked with the reason); `agentlog audit verify` needs it. Empty: records are written "
            "unchained and nothing is verified. Only workers and auditors may hold it."
        ),
    )
    # History-size thresholds (Temporal's defaults).
    history_warn_events: int = setting(
        default=10_240,
        description="A run past this many events is flagged (ctx.history_near_limit(), audit history-size).",
    )
    history_warn_bytes: int = setting(
        default=10 * 1024 * 1024, description="A run past this many bytes of history is flagged."
    )
    history_limit_events: int = setting(
        default=51_200, description="A run reaching this many events is parked."
    )
    history_limit_bytes: int = setting(
        default=50 * 1024 * 1024, description="A run reaching this many bytes of history is parked."
    )
    # A run whose records start this many offsets behind a checkpoint gets a HistorySnapshot, so a
    # rebuild reads from the checkpoint rather than from the run's start (runtime.worker.snapshots).
    run_snapshot_lag: int = setting(
        default=10_000,
        ge=1,
        description="A waiting run this many records behind a checkpoint gets a history snapshot, so a "
        "rebuild starts at the checkpoint.",
    )
    # Unset, no operations port is opened; each process needs its own port.
    metrics_port: int | None = setting(
        default=None,
        ge=0,
        le=65_535,
        description="Port of /metrics, /healthz and /readyz of `agentlog worker` and `agentlog sink` "
        "(--metrics-port); unset opens none, 0 picks a free port (logged).",
    )
    metrics_host: str = setting(
        default="127.0.0.1",
        description="Address the operations port listens on; 0.0.0.0 lets a scraper or a Kubernetes probe on "
        "another host in.",
    )

    def __post_init__(self) -> None:
        """Every field read as its type and checked against its bounds; then the rules between fields.
        ConfigError names every field that is wrong, never a value given (``kafka`` may hold a password)."""
        errors: list[str] = []
        for name, info in self.model_fields.items():
            try:
                value = _coerce(info.annotation, getattr(self, name))
                _check_bounds(info, value)
            except ValueError as error:
                errors.append(f"{name}: {error}")
                continue
            object.__setattr__(self, name, value)  # frozen: set once, here
        if not errors:
            errors += [f"kafka: {e}" for e in _passthrough_errors(self.kafka)]
            if self.clickhouse_dsn and not self.clickhouse_dsn.startswith(("chdb://", "http://", "https://")):
                errors.append("clickhouse_dsn: must start with chdb://, http:// or https://")
            if self.history_warn_events > self.history_limit_events:
                errors.append("settings: history_warn_events must not exceed history_limit_events")
            if self.history_warn_bytes > self.history_limit_bytes:
                errors.append("settings: history_warn_bytes must not exceed history_limit_bytes")
        if errors:
            raise ConfigError("; ".join(errors))

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Settings:
        """A copy with the fields of ``update`` changed (checked as a new Settings is)."""
        return dataclasses.replace(self, **(update or {}))

    @property
    def analytics_dsn(self) -> str:
        return self.clickhouse_dsn or f"chdb://{self.state_dir / 'analytics'}"

    def kafka_common(self) -> dict[str, Any]:
        """librdkafka settings every client of this deployment shares.

        Nagle's algorithm off: a step waits on small produce requests and their acks, and Nagle
        holds a small write back until the previous one is acknowledged, which adds a round trip
        to the steps that write twice.

        Reconnect backoff 10 ms (librdkafka's default is 100): a new client's first request goes
        to the bootstrap address, and once the metadata names the broker behind it librdkafka
        drops that bootstrap handle -- with the consumer group's FindCoordinator request in it.
        The retry waits for the next "sparse connect", half the reconnect backoff: 50 ms of
        every worker's join (and so of every restart's recovery) spent idle. The backoff still
        doubles per failed attempt up to ``reconnect.backoff.max.ms``, so a dead broker is not
        hammered."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "socket.nagle.disable": True,
            "reconnect.backoff.ms": 10,
            **self.kafka,
        }


def _environment_values(environ: dict[str, str]) -> dict[str, Any]:
    """``AGENTLOG_<KEY>`` variables (the name in any case) as raw values for the model; a
    mapping (``AGENTLOG_KAFKA``) is JSON. Unknown keys raise ConfigError, naming them."""
    fields = Settings.model_fields
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for variable, raw in environ.items():
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        name = upper[len(ENV_PREFIX) :].lower()
        if name not in fields:
            unknown.append(variable)
            continue
        if get_origin(fields[name].annotation) is dict:
            try:
                values[name] = json.loads(raw)
            except json.JSONDecodeError as error:
                raise ConfigError(f"{variable} must be a JSON object: {error}") from error
        else:
            values[name] = raw
    if unknown:
        raise ConfigError(f"unknown configuration key(s) in the environment: {', '.join(sorted(unknown))}")
    return values


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment and ``overrides``; unknown keys raise ConfigError."""
    from_environment = _environment_values(dict(os.environ))
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"unknown configuration key(s): {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**{**from_environment, **given})


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _coerce(annotation: Any, value: Any) -> Any:
    """``value`` as ``annotation`` (a string as the environment gives it read as the type), or
    ValueError saying what was expected -- never showing the value."""
    if isinstance(annotation, UnionType):  # ``int | None``
        if value is None:
            return None
        (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ValueError("expected a string")
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError("expected true or false")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ValueError("expected an integer")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ValueError("expected a number")
    if annotation is Path:
        if isinstance(value, (str, os.PathLike)):
            return Path(value)
        raise ValueError("expected a path")
    if annotation is SecretStr:
        if isinstance(value, SecretStr):
            return value
        if isinstance(value, str):
            return SecretStr(value)
        secret = getattr(value, "get_secret_value", None)  # pydantic's SecretStr
        if callable(secret) and isinstance(secret(), str):
            return SecretStr(secret())
        raise ValueError("expected a string")
    if get_origin(annotation) is dict:  # dict[str, str]
        if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return dict(value)
        raise ValueError("expected a JSON object of strings")
    raise TypeError(f"no reader for settings of type {annotation}")  # a field added with a new type


def _check_bounds(info: FieldInfo, value: Any) -> None:
    if value is None:
        return
    if info.ge is not None and value < info.ge:
        raise ValueError(f"must be at least {info.ge:g}")
    if info.gt is not None and value <= info.gt:
        raise ValueError(f"must be greater than {info.gt:g}")
    if info.le is not None and value > info.le:
        raise ValueError(f"must be at most {info.le:g}")


def _passthrough_errors(kafka: dict[str, str]) -> list[str]:
    return [
        f"kafka setting {key!r} is not allowed; only {', '.join(_PASSTHROUGH_PREFIXES)}* pass through"
        for key in kafka
        if not key.startswith(_PASSTHROUGH_PREFIXES)
    ]


def _field_infos() -> dict[str, FieldInfo]:
    types = typing.get_type_hints(Settings)
    return {
        f.name: FieldInfo(
            annotation=types[f.name],
            description=f.metadata["description"],
            default=f.default,
            default_factory=None if f.default_factory is dataclasses.MISSING else f.default_factory,
            ge=f.metadata["ge"],
            gt=f.metadata["gt"],
            le=f.metadata["le"],
        )
        for f in dataclasses.fields(Settings)
    }


Settings.model_fields = _field_infos()
