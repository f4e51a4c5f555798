"""One settings model for every agentlog process.

Values come from, in rising precedence: defaults, ``AGENTLOG_*`` environment variables,
keyword arguments (the CLI passes its flags this way). Every key is validated when the
settings are built; an unknown key -- a typo such as ``AGENTLOG_BOOTSTRAP_SEVERS`` -- is
rejected with its name instead of being silently ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from runtime.errors import TerminalError

ENV_PREFIX = "AGENTLOG_"

# librdkafka settings a user may pass through (security and client tuning of their cluster).
# Anything else is refused: a misspelt key would otherwise surface as a late, vague librdkafka error.
_PASSTHROUGH_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.dns.lookup", "socket.")


class ConfigError(TerminalError, ValueError):
    """A configuration key or value is wrong; the message names the key. (A ValueError too: callers
    written before the taxonomy catch it as one.)"""


# The dimensions of a limit (runtime.workflow.limits.DIMENSIONS, which this layer may not import;
# tests/unit/test_limits_declared.py keeps the two equal).
LIMIT_DIMENSIONS = ("requests_per_minute", "tokens_per_minute", "concurrent")


def _default_state_dir() -> Path:
    """`.agentlog/` in the current directory"""
    return Path.cwd() / ".agentlog"


class Settings(BaseModel):
    """Configuration of agentlog; each field's description is its meaning (the docs' settings page). Built by
    ``load_settings``, which reads the environment itself: pydantic-settings would do it with
    imports that weigh on a recovering worker's start-up, for a dozen variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Each field's description is its meaning on the settings page of the docs
    # (tools/docs_reference.py generates it; a field without one fails tests/unit/test_docs_reference.py).
    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description="The state folder: the local services' data and logs, the schema cache, the embedded "
        "ClickHouse store.",
    )
    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers, comma-separated host:port."
    )
    schema_registry_url: str = Field(
        default="http://127.0.0.1:8081", description="The schema registry (Confluent REST API)."
    )
    clickhouse_dsn: str = Field(
        default="",
        description="The analytics store: chdb:///path (embedded chDB) or http(s)://host:8123 (a ClickHouse "
        "server); empty means chdb://<state_dir>/analytics.",
    )
    commands_topic: str = Field(
        default="agentlog.commands", description="Submissions, signals and cancellations, keyed by run id."
    )
    events_topic: str = Field(
        default="agentlog.events", description="The journal of every run, keyed by run id, kept forever."
    )
    checkpoints_topic: str = Field(
        default="agentlog.checkpoints",
        description="Compacted: where a rebuild may start, the run index and history snapshots.",
    )
    # Call results larger than this many bytes are stored out of line, in payloads_topic; the
    # event keeps the offset, the size and a sha256, so histories stay small to replay and copy.
    payloads_topic: str = Field(
        default="agentlog.payloads",
        description="Call results and prompt messages too large to keep inline, in the run's partition.",
    )
    keys_topic: str = Field(
        default="agentlog.keys",
        description="Compacted: the data key of each run whose contents are sealed (seal_contents), keyed by "
        "run id in the run's partition; `agentlog erase` writes its tombstone.",
    )
    schedules_topic: str = Field(
        default="agentlog.schedules",
        description="Compacted, one partition: the schedules (`agentlog schedule`) and the latest fire time each "
        "scheduler handled, keyed by schedule name; a delete writes tombstones (docs/schedules.md).",
    )
    # What runs do as it happens (runtime.worker.streaming): a view for watchers, never the truth.
    stream_topic: str = Field(
        default="agentlog.stream",
        description="Short retention, keyed by run id in the run's partition: what each run does as it happens "
        "(steps, model deltas, endings) for `Client.stream` and `agentlog watch`; a view, not history.",
    )
    exposed_topic: str = Field(
        default="agentlog.exposed",
        description="Compacted, keyed by run id in the run's partition: the latest state each run exposed "
        "(`ctx.expose`), read by `Client.query` and `agentlog query`.",
    )
    stream_runs: bool = Field(
        default=True,
        description="Workers publish what runs do to stream_topic and what they expose to exposed_topic. Off, "
        "`Client.stream` still shows each step, read from the events topic about a second late, without "
        "model deltas, and `Client.query` finds nothing exposed.",
    )
    # Coordination of the deployment's limits (runtime.worker.limits.shared): a few lease lengths
    # of reports and grants are all it needs, so one partition and short retention.
    limits_topic: str = Field(
        default="agentlog.limits",
        description="One partition, short retention: the workers' reports and the coordinator's lease grants "
        "that share the app's limits (docs/permits.md); coordination, not history.",
    )
    limits_lease_s: float = Field(
        default=6.0,
        gt=0,
        le=300,
        description="How long a worker may use a share of a limit without a renewal; a worker killed while "
        "holding permits costs the others at most this (and a fifth more). At most the group's session timeout.",
    )
    seal_contents: bool = Field(
        default=False,
        description="Seal run inputs, call arguments, messages, results and signal payloads with AES-GCM under "
        "a per-run data key kept in keys_topic, so `agentlog erase` can make them unreadable (crypto-shredding).",
    )
    payload_inline_limit: int = Field(
        default=16_384,
        ge=0,
        description="A call result over this many bytes goes to payloads_topic; the event keeps its offset, "
        "size and sha256.",
    )
    partitions: int = Field(
        default=12,
        ge=1,
        le=10_000,
        description="Partitions of the commands and events topics (the same count for both).",
    )
    worker_group: str = Field(
        default="agentlog-workers", description="Consumer group of the workers on the commands topic."
    )
    # Ports of the locally started services (``agentlog infra``).
    kafka_port: int = Field(
        default=9092, description="Port of the local Kafka broker (agentlog infra); a 3-node cluster uses 3."
    )
    kafka_controller_port: int = Field(
        default=9093, description="Port of the local KRaft controller (agentlog infra)."
    )
    kafka_jvm_options: list[str] = Field(
        default_factory=list,
        description="Extra JVM options of the local Kafka nodes (agentlog infra), as a JSON list: e.g. "
        '["-XX:TieredStopAtLevel=1"] for clusters that live minutes (half the start-up CPU, slower later).',
    )
    registry_port: int = Field(
        default=8081, description="Port of the local schema registry (agentlog infra)."
    )
    postgres_port: int = Field(
        default=15432, description="Port of the local PostgreSQL that stores the registry's schemas."
    )
    # librdkafka pass-through settings; they may hold credentials (sasl.password), so no repr shows them.
    kafka: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="librdkafka settings passed to every Kafka client, as a JSON object: security.protocol, "
        "sasl.*, ssl.*, client.dns.lookup, socket.* only.",
    )
    # Capacities of the app's declared limits (runtime.workflow.limits), overridden by limit name:
    # operators change them without a deploy. The worker checks the names against the app at start.
    limits: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Overrides of the app's declared limits, as a JSON object: limit name -> "
        '{"requests_per_minute" | "tokens_per_minute" | "concurrent": capacity > 0}, e.g. '
        '{"openai": {"requests_per_minute": 500}}. See docs/limits.md.',
    )
    # The OpenAI-compatible model endpoint used by runtime.models.openai.OpenAIChatModel.from_settings.
    model_base_url: str = Field(
        default="https://api.openai.com/v1",
        description="Base URL of the OpenAI-compatible endpoint of runtime.models.openai.OpenAIChatModel.",
    )
    model_api_key: SecretStr = Field(
        default=SecretStr(""), description="API key of that endpoint (never shown in a repr or a log)."
    )
    model_name: str = Field(default="gpt-4o-mini", description="Model name sent to that endpoint.")
    model_timeout_s: float = Field(
        default=60.0, gt=0, description="Seconds before a request to that endpoint times out."
    )
    chain_key: SecretStr = Field(
        default=SecretStr(""),
        repr=False,
        description=(
            "The workers' key of the runs' hash chain (keyed BLAKE2b, runtime.log.records.chain): with it a "
            "worker seals every run record it writes and refuses to replay one that does not verify (the "
            "run is parked with the reason); `agentlog audit verify` needs it. Empty: records are written "
            "unchained and nothing is verified. Only workers and auditors may hold it."
        ),
    )
    signing_key: SecretStr = Field(
        default=SecretStr(""),
        repr=False,
        description=(
            "The workers' Ed25519 private key (PEM, or the raw 32 bytes in base64; "
            "runtime.log.records.signing): with it a worker signs each record that sets a run's status "
            "(RunStarted, its ending, RunParked). Only workers may hold it."
        ),
    )
    verify_key: str = Field(
        default="",
        description=(
            "The workers' Ed25519 public key (PEM, or 32 bytes in base64): with it clients, `agentlog "
            "status`/`history` and `audit verify` name a status-bearing record no worker signed as forged "
            "and never return it as a run's state or result. Public: give it to every client and auditor."
        ),
    )
    # History-size thresholds (Temporal's defaults).
    history_warn_events: int = Field(
        default=10_240,
        description="A run past this many events is flagged (ctx.history_near_limit(), audit history-size).",
    )
    history_warn_bytes: int = Field(
        default=10 * 1024 * 1024, description="A run past this many bytes of history is flagged."
    )
    history_limit_events: int = Field(
        default=51_200, description="A run reaching this many events is parked."
    )
    history_limit_bytes: int = Field(
        default=50 * 1024 * 1024, description="A run reaching this many bytes of history is parked."
    )
    # A run whose records start this many offsets behind a checkpoint gets a HistorySnapshot, so a
    # rebuild reads from the checkpoint rather than from the run's start (runtime.worker.snapshots).
    # 2,000 runs in memory is ~32 MB at ~16 KB a run, while a wake (decode + replay of a waiting
    # run's few records) costs ~0.1-0.3 ms: a worker serving far more waiting runs than that pays a
    # wake per signal or timer instead of memory it cannot bound (runtime.worker.run_cache).
    run_cache_size: int = Field(
        # A waiting PydanticAI run holds ~150 KB (its agent task and state), a native one ~12 KB:
        # 500 keeps either kind within tens of MB, and waking one costs a replay (0.1-5 ms).
        default=500,
        ge=1,
        description="Runs a worker keeps in memory across its partitions; past it, the least recently "
        "active runs that wait only on signals or timers are evicted and replayed when something "
        "reaches them. Also the most runs busy at once unless run_cache_busy_max says otherwise.",
    )
    run_cache_busy_max: int | None = Field(
        # Framework runs are costly while busy (a PydanticAI run woken rebuilds its agent loop):
        # a lower bound than the cache's trades concurrency for a burst's peak (docs/concepts.md).
        default=None,
        ge=1,
        description="Runs a worker keeps busy at once (a call in flight, a signal being applied); further "
        "submissions and wakes of evicted runs are held, in their partition's order, until one ends or "
        "waits (runtime.worker.admission). Default: run_cache_size.",
    )
    run_snapshot_lag: int = Field(
        default=10_000,
        ge=1,
        description="A waiting run this many records behind a checkpoint gets a history snapshot, so a "
        "rebuild starts at the checkpoint.",
    )
    # Unset, no operations port is opened; each process needs its own port.
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65_535,
        description="Port of /metrics, /healthz and /readyz of `agentlog worker` and `agentlog sink` "
        "(--metrics-port); unset opens none, 0 picks a free port (logged).",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Address the operations port listens on; 0.0.0.0 lets a scraper or a Kubernetes probe on "
        "another host in.",
    )
    # The worker's resource watch (runtime.worker.resources): limits besides the process's own.
    resource_max_descriptors: int | None = Field(
        default=None,
        ge=1,
        description="Open file descriptors a worker counts as its limit when lower than its RLIMIT_NOFILE "
        "(unset: RLIMIT_NOFILE alone).",
    )
    resource_max_threads: int | None = Field(
        default=None,
        ge=1,
        description="Threads a worker counts as its limit when lower than its cgroup's pids.max and "
        "RLIMIT_NPROC (unset: those alone; neither set, threads are not watched).",
    )
    resource_max_memory_bytes: int | None = Field(
        default=None,
        ge=1,
        description="Resident memory a worker counts as its limit when lower than its cgroup's memory limit "
        "(unset: the cgroup's alone; neither set, memory is not watched).",
    )
    resource_high_water: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="A worker using this share of a resource's limit (descriptors, threads, memory) is not "
        "ready (/readyz names it) until it is back under resource_low_water.",
    )
    resource_low_water: float = Field(
        default=0.8, gt=0, le=1, description="A worker short of a resource is ready again under this share."
    )
    price_table: Path | None = Field(
        default=None,
        description="The model prices a worker charges runs' budgets by: a CSV file in the format of "
        "`agentlog audit prices load`; read at start (a file that does not parse refuses the start) and "
        "again when it changes. Unset: a budget's max_cost counts nothing (tokens and calls still count).",
    )

    @field_validator("kafka")
    @classmethod
    def _only_passthrough_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith(_PASSTHROUGH_PREFIXES):
                raise ValueError(
                    f"kafka setting {key!r} is not allowed; only {', '.join(_PASSTHROUGH_PREFIXES)}* pass through"
                )
        return value

    @field_validator("limits")
    @classmethod
    def _limit_overrides(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for name, capacities in value.items():
            for dimension, capacity in capacities.items():
                if dimension not in LIMIT_DIMENSIONS:
                    raise ValueError(
                        f"limits.{name}: {dimension!r} is not a dimension of a limit "
                        f"({', '.join(LIMIT_DIMENSIONS)})"
                    )
                if not capacity > 0:
                    raise ValueError(f"limits.{name}.{dimension} must be greater than 0, not {capacity}")
                if dimension == "concurrent" and capacity != int(capacity):
                    raise ValueError(f"limits.{name}.concurrent must be a whole number, not {capacity}")
        return value

    @field_validator("clickhouse_dsn")
    @classmethod
    def _known_dsn_scheme(cls, value: str) -> str:
        if value and not value.startswith(("chdb://", "http://", "https://")):
            raise ValueError(f"clickhouse_dsn {value!r} must start with chdb://, http:// or https://")
        return value

    @model_validator(mode="after")
    def _warn_below_limit(self) -> Settings:
        if self.history_warn_events > self.history_limit_events:
            raise ValueError("history_warn_events must not exceed history_limit_events")
        if self.history_warn_bytes > self.history_limit_bytes:
            raise ValueError("history_warn_bytes must not exceed history_limit_bytes")
        return self

    @model_validator(mode="after")
    def _low_water_below_high(self) -> Settings:
        if self.resource_low_water > self.resource_high_water:
            raise ValueError(
                f"resource_low_water ({self.resource_low_water:g}) must not exceed resource_high_water "
                f"({self.resource_high_water:g})"
            )
        return self

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
        origin = get_origin(fields[name].annotation)
        if origin in (dict, list):
            try:
                values[name] = json.loads(raw)
            except json.JSONDecodeError as error:
                shape = "object" if origin is dict else "list"
                raise ConfigError(f"{variable} must be a JSON {shape}: {error}") from error
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
    try:
        return Settings(**{**from_environment, **given})
    except ValidationError as exc:
        raise ConfigError(_without_values(exc)) from exc


def _without_values(error: ValidationError) -> str:
    """The validation errors by field, without the values given: pydantic's own message quotes the
    input, and a mapping such as ``kafka`` may hold a password."""
    return "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or 'settings'}: {detail['msg']}"
        for detail in error.errors(include_input=False, include_url=False)
    )
