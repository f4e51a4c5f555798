"""Versioned, idempotent DDL for the analytics store.

Each migration has a version, a name and statements; ``migrate`` applies the missing ones in
order and records each in ``agentlog.schema_migrations`` with a checksum of its statements. A
migration is never edited once released: a checksum that no longer matches raises, because the
store would otherwise silently differ from what the code believes. Every statement is itself
idempotent (``IF NOT EXISTS``, ``CREATE OR REPLACE VIEW``), so a crash between a statement and
its ledger row only repeats harmless work.

Field columns for schemas released after a migration was written are added by the sink when it
first meets the writer schema (``consumers.columns``: a *derived* migration, also idempotent);
the views below only name columns created here.

Views rather than materialized views: a view always agrees with the raw rows, including the
fencing verdict, whereas a materialized view fed by the same insert is a second, separately
committed part that a kill between the two could lose or double. The raw table is ordered by
run id, so per-run questions read a few granules; whole-store aggregates scan, which at audit
frequency is cheap. A later migration can add materialized tables if a store outgrows that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import TerminalError
from runtime.log.records.status import ENDING_EVENTS, STATUS_BY_EVENT

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

from .tables import (
    DATABASE,
    ENVELOPE_COLUMNS,
    EVENTS,
    MIGRATIONS,
    PAYLOADS,
    PRICES,
    SINK_COLUMNS,
    WRITER_SCHEMAS,
    quote_identifier,
    quote_string,
)


class MigrationError(TerminalError):
    """The store's migration ledger disagrees with the code (an applied migration was edited)."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]

    @property
    def checksum(self) -> str:
        return hashlib.sha256("\n;\n".join(self.statements).encode()).hexdigest()[:16]


# The field columns of the event schemas as released with version 1 (schemas/*.avsc).
_V1_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("active_runs", "Map(String, Int64)"),
    ("args", "Nullable(String)"),
    ("args_hash", "Nullable(String)"),
    ("attempt", "Nullable(Int32)"),
    ("check", "Nullable(String)"),
    ("command_offset", "Nullable(Int64)"),
    ("commands_offset", "Nullable(Int64)"),
    ("covered_offset", "Nullable(Int64)"),
    ("duration_ms", "Nullable(Int64)"),
    ("effect", "Nullable(Bool)"),
    ("error", "Nullable(String)"),
    ("error_type", "LowCardinality(Nullable(String))"),
    ("expected", "Nullable(String)"),
    ("final", "Nullable(Bool)"),
    ("fire_at", "Nullable(DateTime64(3, 'UTC'))"),
    ("idempotency_key", "Nullable(String)"),
    ("in_doubt", "Nullable(Bool)"),
    ("input", "Nullable(String)"),
    ("issued", "Nullable(String)"),
    ("latency_us", "Nullable(Int64)"),
    ("message", "Nullable(String)"),
    ("model", "LowCardinality(Nullable(String))"),
    ("name", "LowCardinality(Nullable(String))"),
    ("new_run_id", "Nullable(String)"),
    ("original", "Nullable(String)"),
    ("parent_run_id", "Nullable(String)"),
    ("patch_id", "Nullable(String)"),
    ("payload", "Nullable(String)"),
    ("position", "Nullable(Int32)"),
    ("previous_epoch", "Nullable(Int64)"),
    ("prompt_version", "LowCardinality(Nullable(String))"),
    ("raw", "Nullable(String)"),
    ("reason", "Nullable(String)"),
    ("record_partition", "Nullable(Int32)"),
    ("replacement", "Nullable(String)"),
    ("result", "Nullable(String)"),
    ("tool", "LowCardinality(Nullable(String))"),
    ("workflow", "LowCardinality(Nullable(String))"),
)


def _columns_sql(columns: Sequence[tuple[str, str]]) -> str:
    return ",\n    ".join(f"{quote_identifier(name)} {ch_type}" for name, ch_type in columns)


_EVENTS_TABLE = f"""CREATE TABLE IF NOT EXISTS {EVENTS} (
    {_columns_sql((*SINK_COLUMNS, *ENVELOPE_COLUMNS, *_V1_FIELD_COLUMNS))}
)
ENGINE = MergeTree
ORDER BY (run_id, topic, partition, offset)
SETTINGS non_replicated_deduplication_window = 1000"""

_WRITER_SCHEMAS_TABLE = f"""CREATE TABLE IF NOT EXISTS {WRITER_SCHEMAS} (
    schema_id Int32,
    record String,
    full_name String,
    fields Array(String),
    columns Array(String),
    definition String,
    first_seen DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY schema_id"""


def _in(types: Sequence[str]) -> str:
    return "(" + ", ".join(f"'{t}'" for t in types) + ")"


# The runs view as migration 3 released it, its status vocabulary frozen in its text (an applied
# migration never changes): "continued_as_new", and no ended_at for a parked run.
_V3_TERMINAL_TYPES = ("RunCompleted", "RunFailed", "RunCancelled", "RunContinuedAsNew", "RunRejected")
_V3_STATUS_TYPES = ("RunStarted", "RunParked", *_V3_TERMINAL_TYPES)

_RUNS_VIEW_V3 = f"""CREATE OR REPLACE VIEW {DATABASE}.runs AS
SELECT
    run_id,
    any(topic) AS topic,
    any(partition) AS partition,
    anyIf(workflow, type IN ('RunStarted', 'RunRejected')) AS workflow,
    argMaxIf(type, offset, type IN {_in(_V3_STATUS_TYPES)}) AS last_status_event,
    multiIf(
        last_status_event = 'RunCompleted', 'completed',
        last_status_event = 'RunFailed', 'failed',
        last_status_event = 'RunCancelled', 'cancelled',
        last_status_event = 'RunContinuedAsNew', 'continued_as_new',
        last_status_event = 'RunRejected', 'rejected',
        last_status_event = 'RunParked', 'parked',
        'running') AS status,
    minOrNullIf(occurred_at, type = 'RunStarted') AS started_at,
    maxOrNullIf(occurred_at, type IN {_in(_V3_TERMINAL_TYPES)}) AS ended_at,
    max(occurred_at) AS last_event_at,
    count() AS events,
    sum(size) AS bytes,
    max(seq) AS last_seq,
    countIf(type = 'RunParked') AS parked_times
FROM {EVENTS}
WHERE fenced = 0 AND run_id != ''
GROUP BY run_id"""


def _status_of(column: str) -> str:
    """SQL: the run status set by the event type in ``column`` (runtime.log.records.status's vocabulary)."""
    arms = "".join(
        f"\n        {column} = {quote_string(event)}, {quote_string(state)},"
        for event, state in STATUS_BY_EVENT.items()
    )
    return f"multiIf({arms}\n        'unknown')"


# Statuses generated from runtime.log.records.status, so the store and the client cannot disagree: a run
# with no status event is "unknown", and a parked run has ended (ended_at is when it was parked).
# Changing that vocabulary changes this text, which migration 7 has released: the migration
# checksum test then fails, and the change belongs in a new migration.
_RUNS_VIEW_V7 = f"""CREATE OR REPLACE VIEW {DATABASE}.runs AS
SELECT
    run_id,
    any(topic) AS topic,
    any(partition) AS partition,
    anyIf(workflow, type IN ('RunStarted', 'RunRejected')) AS workflow,
    argMaxIf(type, offset, type IN {_in(tuple(STATUS_BY_EVENT))}) AS last_status_event,
    {_status_of("last_status_event")} AS status,
    minOrNullIf(occurred_at, type = 'RunStarted') AS started_at,
    maxOrNullIf(occurred_at, type IN {_in(ENDING_EVENTS)}) AS ended_at,
    max(occurred_at) AS last_event_at,
    count() AS events,
    sum(size) AS bytes,
    max(seq) AS last_seq,
    countIf(type = 'RunParked') AS parked_times
FROM {EVENTS}
WHERE fenced = 0 AND run_id != ''
GROUP BY run_id"""


def _call_view(kind: str, extra: str) -> str:
    return f"""CREATE OR REPLACE VIEW {DATABASE}.{kind.lower()}_calls AS
{_call_view_select(kind, extra)}"""


def _call_view_select(kind: str, extra: str) -> str:
    """The per-call aggregate of the call views (its text is part of migration 3: keep it)."""
    scheduled, completed, failed = f"{kind}CallScheduled", f"{kind}CallCompleted", f"{kind}CallFailed"
    outcome = f"type IN ('{completed}', '{failed}')"
    return f"""SELECT
    run_id,
    position,
    {extra},
    minOrNullIf(occurred_at, type = '{scheduled}') AS scheduled_at,
    maxOrNullIf(occurred_at, {outcome}) AS finished_at,
    countIf(type = '{scheduled}') AS scheduled,
    countIf({outcome}) AS attempts,
    countIf(type = '{completed}') AS completions,
    countIf(type = '{failed}') AS failures,
    maxIf(attempt, {outcome}) AS last_attempt,
    multiIf(
        completions > 0, 'completed',
        countIf(type = '{failed}' AND ifNull(final, true)) > 0, 'failed',
        attempts > 0, 'retrying',
        'pending') AS outcome,
    argMaxIf(latency_us, offset, {outcome}) AS last_latency_us,
    sumIf(latency_us, {outcome}) AS total_latency_us,
    ifNull(maxIf(in_doubt, {outcome}), false) AS was_in_doubt,
    any(topic) AS topic,
    any(partition) AS partition
FROM {EVENTS}
WHERE fenced = 0 AND type IN ('{scheduled}', '{completed}', '{failed}')
GROUP BY run_id, position"""


# Migration 10: usage of the completed attempts (a retried or re-executed call costs what each
# completed attempt reported), and the model name prices are looked up by: the one the provider
# reported, else the registered name.
_MODEL_EXTRA_V10 = (
    "anyIf(model, type = 'ModelCallScheduled') AS model,\n"
    "    anyIf(prompt_version, type = 'ModelCallScheduled') AS prompt_version,\n"
    "    anyIf(args_hash, type = 'ModelCallScheduled') AS args_hash,\n"
    "    sumIf(input_tokens, type = 'ModelCallCompleted') AS input_tokens,\n"
    "    sumIf(output_tokens, type = 'ModelCallCompleted') AS output_tokens,\n"
    "    sumIf(cached_tokens, type = 'ModelCallCompleted') AS cached_tokens,\n"
    "    anyIf(response_model, type = 'ModelCallCompleted') AS response_model,\n"
    "    ifNull(response_model, ifNull(model, '')) AS priced_model"
)
_MODEL_CALLS_VIEW = _call_view(
    "Model",
    "anyIf(model, type = 'ModelCallScheduled') AS model,\n"
    "    anyIf(prompt_version, type = 'ModelCallScheduled') AS prompt_version",
)
_TOOL_CALLS_VIEW = _call_view(
    "Tool",
    "anyIf(tool, type = 'ToolCallScheduled') AS tool,\n"
    "    anyIf(idempotency_key, type = 'ToolCallScheduled') AS idempotency_key,\n"
    "    ifNull(anyIf(effect, type = 'ToolCallScheduled'), false) AS effecting,\n"
    "    anyIf(args_hash, type = 'ToolCallScheduled') AS args_hash",
)

_DIVERGENCES_VIEW = f"""CREATE OR REPLACE VIEW {DATABASE}.divergences AS
SELECT
    run_id,
    occurred_at,
    multiIf(type = 'Redecided', 'redecided', type = 'NonDeterminismDetected', 'non_determinism', 'parked') AS kind,
    position,
    multiIf(
        type = 'Redecided',
        concat('check: ', ifNull(check, ''), '; original: ', ifNull(original, ''),
               '; replacement: ', ifNull(replacement, ''),
               if(ifNull(reason, '') != '', concat('; reason: ', reason), '')),
        type = 'NonDeterminismDetected',
        concat(ifNull(message, ''), ' (history: ', ifNull(expected, ''), '; code issued: ', ifNull(issued, ''), ')'),
        ifNull(reason, '')) AS detail,
    original, check, replacement, expected, issued, message, reason,
    topic, partition, offset, seq
FROM {EVENTS}
WHERE fenced = 0 AND type IN ('Redecided', 'NonDeterminismDetected', 'RunParked')"""

# Thresholds are parameters, so they come from Settings at query time, not from the DDL.
_HISTORY_SIZE_VIEW = f"""CREATE OR REPLACE VIEW {DATABASE}.history_size AS
SELECT
    run_id,
    workflow,
    status,
    events,
    bytes,
    toBool(events >= {{warn_events:UInt64}} OR bytes >= {{warn_bytes:UInt64}}) AS over_warn,
    toBool(events >= {{limit_events:UInt64}} OR bytes >= {{limit_bytes:UInt64}}) AS over_limit
FROM {DATABASE}.runs"""


# Insert parts stay *compact* (all columns in one file) until merges grow them past 256 MiB. A
# sink batch is one part of ~60 columns; written wide, that is ~200 files (data, marks, null
# maps) per batch, and creating them costs more than encoding the data, so compact parts take
# a large share off the store's CPU per batch (bench/sink.py measures it). Large merged parts
# still become wide, which is what scans want.
_COMPACT_INSERT_PARTS = f"ALTER TABLE {EVENTS} MODIFY SETTING min_bytes_for_wide_part = 268435456"

# Fields added to RunStarted for `agentlog reset` (a derived migration would add them as well,
# on the first such record; shipping them keeps the store's shape independent of what was seen).
_V5_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("reset_position", "Nullable(Int32)"),
    ("key_root", "Nullable(String)"),
)
_RESET_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V5_FIELD_COLUMNS
)

# Fields of a result stored out of line (ModelCallCompleted, ToolCallCompleted).
_V6_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("result_offset", "Nullable(Int64)"),
    ("result_sha256", "Nullable(String)"),
    ("result_size", "Nullable(Int32)"),
)
_PAYLOAD_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V6_FIELD_COLUMNS
)

# Fields of PromptDrifted (a model call served from history under a changed prompt, seed 003)
# and the view the audit reads: "position 1 decided under prompt v1; code now issues v2".
_V8_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recorded_prompt_version", "Nullable(String)"),
    ("issued_prompt_version", "Nullable(String)"),
    ("recorded_args_hash", "Nullable(String)"),
    ("issued_args_hash", "Nullable(String)"),
)
_DRIFT_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V8_FIELD_COLUMNS
)
# Migration 9. The column once copied the writer's envelope field, a constant 1; the sink now
# fills it from the frame (consumers.store_writer), as the runtime's decoder does. Rows stored
# before carry the old 1.
_SCHEMA_VERSION_COMMENT = (
    f"ALTER TABLE {EVENTS} COMMENT COLUMN schema_version "
    "'The schema registry version of the writer schema (the frame schema_id) under the record subject; "
    "filled by the sink from the frame, not an Avro field. 1 on rows stored before migration 9.'"
)
_PROMPT_DRIFT_VIEW = f"""CREATE OR REPLACE VIEW {DATABASE}.prompt_drift AS
SELECT
    run_id,
    occurred_at,
    position,
    model,
    recorded_prompt_version,
    issued_prompt_version,
    recorded_args_hash,
    issued_args_hash,
    concat('position ', toString(position), ' decided under prompt ', ifNull(recorded_prompt_version, 'none'),
           '; code now issues ', ifNull(issued_prompt_version, 'none')) AS detail,
    topic, partition, offset, seq
FROM {EVENTS}
WHERE fenced = 0 AND type = 'PromptDrifted'"""

# Migration 10: the audit record answers "why". Fields of ModelCallScheduled (the prompt: the
# run's message sequence, runtime.log.records.prompts), ModelCallCompleted (usage) and RunStarted (the
# OpenTelemetry trace id, a fork's overrides).
_V10_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("message_count", "Nullable(Int32)"),
    ("message_slots", "Array(Int64)"),
    ("new_roles", "Array(String)"),
    ("new_messages", "Array(String)"),
    ("params", "Nullable(String)"),
    ("input_tokens", "Nullable(Int64)"),
    ("output_tokens", "Nullable(Int64)"),
    ("cached_tokens", "Nullable(Int64)"),
    ("response_model", "Nullable(String)"),
    ("trace_id", "Nullable(String)"),
    ("fork_overrides", "Nullable(String)"),
)
_AUDIT_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V10_FIELD_COLUMNS
)

# ToolCallScheduled.compensates (runtime.workflow.compensation): a compensating call names the
# position of the effect it undoes.
_V12_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (("compensates", "Nullable(Int32)"),)
_COMPENSATION_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V12_FIELD_COLUMNS
)

# Every event's link in its run's hash chain (runtime.log.records.chain), the Avro bytes as they
# are: `agentlog audit verify --from-store` re-encodes each row and checks it against its link.
_V14_FIELD_COLUMNS: tuple[tuple[str, str], ...] = (("chain", "Nullable(String)"),)
_CHAIN_COLUMNS = f"ALTER TABLE {EVENTS} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {ch_type}" for name, ch_type in _V14_FIELD_COLUMNS
)

# Prices are data, not code: `agentlog audit prices load FILE` replaces the rows; cost is computed
# when a view is read, so a corrected price re-prices history. A row holds from from_date until
# the model's next row. Prices per token, in USD; cached tokens are part of input_tokens.
_PRICES_TABLE = f"""CREATE TABLE IF NOT EXISTS {PRICES} (
    model String,
    from_date DateTime64(3, 'UTC'),
    input_per_token Float64,
    output_per_token Float64,
    cached_per_token Float64
)
ENGINE = MergeTree
ORDER BY (model, from_date)"""

# A message's canonical JSON from its stored form (runtime.log.records.prompts.message_json): the
# {"content", "role"} wrapper is rebuilt; any other shape is stored whole.
_MESSAGE_JSON = (
    "if(r = '', b, concat('{{\"content\":', toJSONString(b), ',\"role\":', toJSONString(r), '}}'))"
)

# The prompt of each recorded model call, rebuilt in SQL from the run's message sequence: each
# ModelCallScheduled appends its new messages (first_new = how many came before it in the run, in
# log order, fenced records excluded as the runtime excludes them), and names its prompt as
# ranges of the sequence (or, when it names none, its own new messages).
_PROMPTS = f"""
    SELECT
        run_id,
        position,
        message_count,
        params,
        if(empty(message_slots),
           arrayMap(i -> toInt64(first_new + i), range(toUInt64(length(new_messages)))),
           arrayFlatten(arrayMap(
               i -> arrayMap(k -> toInt64(message_slots[2 * i - 1] + k), range(toUInt64(message_slots[2 * i]))),
               range(1, toUInt64(intDiv(length(message_slots), 2) + 1))))) AS slots
    FROM (
        SELECT run_id, position, offset, message_count, message_slots, new_messages, params,
            ifNull(sum(length(new_messages)) OVER (
                PARTITION BY run_id ORDER BY offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS first_new
        FROM {EVENTS}
        WHERE fenced = 0 AND type = 'ModelCallScheduled'
    )"""
_SEQUENCES = f"""
    SELECT run_id,
        arrayFlatten(arrayMap(x -> x.2, arraySort(x -> x.1, groupArray((offset, arrayMap(
            (r, b) -> {_MESSAGE_JSON.format()}, new_roles, new_messages)))))) AS sequence
    FROM {EVENTS}
    WHERE fenced = 0 AND type = 'ModelCallScheduled'
    GROUP BY run_id"""

_MODEL_CALLS_VIEW_V10 = f"""CREATE OR REPLACE VIEW {DATABASE}.model_calls AS
WITH
    calls AS (
        {_call_view_select("Model", _MODEL_EXTRA_V10)}
    ),
    prompts AS ({_PROMPTS}
    ),
    sequences AS ({_SEQUENCES}
    ),
    starts AS (
        SELECT run_id, max(ifNull(reset_position, 0)) AS reset_position
        FROM {EVENTS} WHERE fenced = 0 AND type = 'RunStarted' GROUP BY run_id
    )
SELECT
    calls.run_id AS run_id,
    calls.position AS position,
    calls.model AS model,
    calls.* EXCEPT (run_id, position, model),
    if(prompts.message_count >= 0,
       concat('[', arrayStringConcat(arrayMap(s -> sequences.sequence[s + 1], prompts.slots), ','), ']'),
       NULL) AS messages,
    prompts.params AS params,
    if(p.model = '' OR (calls.input_tokens IS NULL AND calls.output_tokens IS NULL), NULL,
       (ifNull(calls.input_tokens, 0) - ifNull(calls.cached_tokens, 0)) * p.input_per_token
       + ifNull(calls.cached_tokens, 0) * p.cached_per_token
       + ifNull(calls.output_tokens, 0) * p.output_per_token) AS cost_usd,
    p.model != '' AS priced,
    -- Copied from the original by a reset or fork (positions before its cut): not a call this run
    -- made, so not a cost of its own (audit cost leaves them out).
    toBool(calls.position < ifNull(starts.reset_position, 0)) AS copied
FROM calls
LEFT JOIN prompts ON prompts.run_id = calls.run_id AND prompts.position = calls.position
LEFT JOIN sequences ON sequences.run_id = calls.run_id
LEFT JOIN starts ON starts.run_id = calls.run_id
ASOF LEFT JOIN {PRICES} AS p
    ON p.model = calls.priced_model AND ifNull(calls.scheduled_at, toDateTime64(0, 3, 'UTC')) >= p.from_date
SETTINGS join_use_nulls = 0, output_format_json_escape_forward_slashes = 0"""

_TOOL_CALLS_VIEW_V10 = _call_view(
    "Tool",
    "anyIf(tool, type = 'ToolCallScheduled') AS tool,\n"
    "    anyIf(idempotency_key, type = 'ToolCallScheduled') AS idempotency_key,\n"
    "    ifNull(anyIf(effect, type = 'ToolCallScheduled'), false) AS effecting,\n"
    "    anyIf(args_hash, type = 'ToolCallScheduled') AS args_hash,\n"
    "    anyIf(args, type = 'ToolCallScheduled') AS args",
)

# The payloads topic copied by the sink (consumers.payloads): out-of-line results and the model
# messages too large for their record (runtime.log.records.prompts). sha256 is computed by the sink from
# the bytes it read, so an altered record never matches the pointer that names it.
_PAYLOADS_TABLE = f"""CREATE TABLE IF NOT EXISTS {PAYLOADS} (
    partition UInt32,
    offset Int64,
    run_id String,
    sha256 String,
    size UInt64,
    content String
)
ENGINE = ReplacingMergeTree
ORDER BY (partition, offset)"""

_BLOB_PREFIX = '{"agentlog_blob":'
# The run's message sequence with each blob pointer replaced by the message it names, when the
# payloads table holds a record with that sha256 (content-addressed: a reset or fork finds the
# blob its original stored); otherwise the pointer stays, and ``audit call`` reports the prompt
# unverified. Only the payloads some pointer names are read.
_BLOB_SHA = "JSONExtractString(m, 'agentlog_blob', 'sha256')"
_SEQUENCES_V11 = f"""
    SELECT s.run_id AS run_id,
        arrayMap(m -> if(startsWith(m, '{_BLOB_PREFIX}') AND indexOf(b.shas, {_BLOB_SHA}) > 0,
                         b.contents[indexOf(b.shas, {_BLOB_SHA})],
                         m),
                 s.sequence) AS sequence
    FROM ({_SEQUENCES}
    ) AS s
    LEFT JOIN (
        SELECT refs.run_id AS run_id, groupArray(p.sha256) AS shas, groupArray(p.content) AS contents
        FROM (
            SELECT DISTINCT run_id, {_BLOB_SHA} AS sha256
            FROM {EVENTS} ARRAY JOIN new_messages AS m
            WHERE fenced = 0 AND type = 'ModelCallScheduled' AND startsWith(m, '{_BLOB_PREFIX}')
        ) AS refs
        INNER JOIN (
            SELECT sha256, any(content) AS content FROM {PAYLOADS}
            WHERE sha256 IN (
                SELECT {_BLOB_SHA} FROM {EVENTS} ARRAY JOIN new_messages AS m
                WHERE type = 'ModelCallScheduled' AND startsWith(m, '{_BLOB_PREFIX}'))
            GROUP BY sha256
        ) AS p ON p.sha256 = refs.sha256
        GROUP BY refs.run_id
    ) AS b ON b.run_id = s.run_id"""

_MODEL_CALLS_VIEW_V11 = _MODEL_CALLS_VIEW_V10.replace(_SEQUENCES, _SEQUENCES_V11)

# Migration 13: a call is priced by the first of three names that has a price -- the model the
# provider reported, the call's own ``model`` parameter (every OpenAI-style call passes one), the
# registered model name -- and ``priced_by`` says which one matched.
_PRICE_NAMES = (
    ("response_model", "pr", "ifNull(response_model, '')"),
    ("model_param", "pp", "JSONExtractString(ifNull(anyIf(params, type = 'ModelCallScheduled'), ''), 'model')"),
    ("registered_name", "pn", "ifNull(model, '')"),
)
_MODEL_EXTRA_V12 = _MODEL_EXTRA_V10.replace(
    "ifNull(response_model, ifNull(model, '')) AS priced_model",
    ",\n    ".join(f"{expr} AS {name}_key" for name, _, expr in _PRICE_NAMES),
)


def _first_priced(column: str, fallback: str) -> str:
    """``column`` of the first price row that matched, in the order of _PRICE_NAMES."""
    arms = ", ".join(f"{alias}.model != '', {alias}.{column}" for _, alias, _ in _PRICE_NAMES)
    return f"multiIf({arms}, {fallback})"


_PRICED_V12 = (
    "    multiIf("
    + ", ".join(f"{alias}.model != '', '{name}'" for name, alias, _ in _PRICE_NAMES)
    + ", '') AS priced_by,\n"
    + "    "
    + _first_priced(
        "model",
        "multiIf(" + ", ".join(f"calls.{name}_key != '', calls.{name}_key" for name, _, _ in _PRICE_NAMES) + ", '')",
    )
    + " AS priced_model,\n"
    + "    if(priced_by = '' OR (calls.input_tokens IS NULL AND calls.output_tokens IS NULL), NULL,\n"
    + "       (ifNull(calls.input_tokens, 0) - ifNull(calls.cached_tokens, 0)) * "
    + _first_priced("input_per_token", "0")
    + "\n       + ifNull(calls.cached_tokens, 0) * "
    + _first_priced("cached_per_token", "0")
    + "\n       + ifNull(calls.output_tokens, 0) * "
    + _first_priced("output_per_token", "0")
    + ") AS cost_usd,\n"
    + "    priced_by != '' AS priced,"
)
_PRICED_V10 = """    if(p.model = '' OR (calls.input_tokens IS NULL AND calls.output_tokens IS NULL), NULL,
       (ifNull(calls.input_tokens, 0) - ifNull(calls.cached_tokens, 0)) * p.input_per_token
       + ifNull(calls.cached_tokens, 0) * p.cached_per_token
       + ifNull(calls.output_tokens, 0) * p.output_per_token) AS cost_usd,
    p.model != '' AS priced,"""
_PRICE_JOIN_V10 = f"""ASOF LEFT JOIN {PRICES} AS p
    ON p.model = calls.priced_model AND ifNull(calls.scheduled_at, toDateTime64(0, 3, 'UTC')) >= p.from_date"""
_PRICE_JOINS_V12 = "\n".join(
    f"""ASOF LEFT JOIN {PRICES} AS {alias}
    ON {alias}.model = calls.{name}_key AND ifNull(calls.scheduled_at, toDateTime64(0, 3, 'UTC')) >= {alias}.from_date"""
    for name, alias, _ in _PRICE_NAMES
)


def _replaced(text: str, old: str, new: str) -> str:
    """``text`` with the one occurrence of ``old`` replaced: a view built from an older one must
    fail loudly, not silently keep the old text, if that text ever moves."""
    if text.count(old) != 1:
        raise AssertionError(f"expected one occurrence of {old[:60]!r} in the view being rebuilt")
    return text.replace(old, new)


_MODEL_CALLS_VIEW_V12 = _replaced(
    _replaced(
        _replaced(_MODEL_CALLS_VIEW_V11, _MODEL_EXTRA_V10, _MODEL_EXTRA_V12),
        _PRICED_V10,
        _PRICED_V12,
    ),
    _PRICE_JOIN_V10,
    _PRICE_JOINS_V12,
)

MIGRATIONS_LIST: tuple[Migration, ...] = (
    Migration(1, "events table", (f"CREATE DATABASE IF NOT EXISTS {DATABASE}", _EVENTS_TABLE)),
    Migration(2, "writer schemas table", (_WRITER_SCHEMAS_TABLE,)),
    Migration(
        3,
        "audit views",
        (_RUNS_VIEW_V3, _MODEL_CALLS_VIEW, _TOOL_CALLS_VIEW, _DIVERGENCES_VIEW, _HISTORY_SIZE_VIEW),
    ),
    Migration(4, "compact insert parts", (_COMPACT_INSERT_PARTS,)),
    Migration(5, "reset columns", (_RESET_COLUMNS,)),
    Migration(6, "out-of-line result columns", (_PAYLOAD_COLUMNS,)),
    Migration(7, "runs view: the runtime's status vocabulary", (_RUNS_VIEW_V7,)),
    Migration(8, "prompt drift columns and view", (_DRIFT_COLUMNS, _PROMPT_DRIFT_VIEW)),
    Migration(9, "schema_version: the registry version of the writer schema", (_SCHEMA_VERSION_COMMENT,)),
    Migration(
        10,
        "audit: prompts, usage, prices and cost",
        (_AUDIT_COLUMNS, _PRICES_TABLE, _MODEL_CALLS_VIEW_V10, _TOOL_CALLS_VIEW_V10),
    ),
    Migration(
        11,
        "payloads table; model_calls resolves messages stored out of line",
        (_PAYLOADS_TABLE, _MODEL_CALLS_VIEW_V11),
    ),
    Migration(12, "compensations: the effect a compensating call undoes", (_COMPENSATION_COLUMNS,)),
    Migration(
        13,
        "model_calls priced by the reported model, the call's model parameter or the registered name",
        (_MODEL_CALLS_VIEW_V12,),
    ),
    Migration(14, "chain: each event's link in its run's hash chain", (_CHAIN_COLUMNS,)),
)

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


def migrate(client: Client, migrations: Sequence[Migration] = MIGRATIONS_LIST) -> list[Migration]:
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


def pending(client: Client, migrations: Sequence[Migration] = MIGRATIONS_LIST) -> list[Migration]:
    """Migrations the store has not applied."""
    from clickhouse_connect.driver.exceptions import DatabaseError  # late: keeps `agentlog --help` fast

    try:
        done = applied_versions(client)
    except DatabaseError:  # no ledger yet: nothing applied
        return list(migrations)
    return [m for m in migrations if m.version not in done]


def table_columns(client: Client, table: str = EVENTS) -> dict[str, str]:
    """Column name -> type of ``table`` (``database.table``)."""
    database, name = table.split(".", 1)
    rows = client.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String} ORDER BY position",
        parameters={"db": database, "t": name},
    ).result_rows
    return {str(n): str(t) for n, t in rows}
