"""Names and fixed columns of the analytics store, shared by the migrations, the sink and the queries.

One database, ``agentlog``. The raw table ``events`` holds one row per record of the events
topic: where it sits in Kafka (topic, partition, offset -- also the sink's resume position, kept
in the same row as the data so the two can never disagree), what the sink derived (record type,
writer schema id, size, the fencing verdict), the envelope every record carries, and one column
per event field. Field columns are created by migrations (see :mod:`analytics.migrations` and
:mod:`consumers.columns`); everything else is fixed here.
"""

from __future__ import annotations

DATABASE = "agentlog"
EVENTS = f"{DATABASE}.events"
WRITER_SCHEMAS = f"{DATABASE}.writer_schemas"
MIGRATIONS = f"{DATABASE}.schema_migrations"
PRICES = f"{DATABASE}.model_prices"
PAYLOADS = f"{DATABASE}.payloads"

# Filled by the sink from the Kafka record and its decoding, never from an event field.
SINK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "LowCardinality(String)"),
    ("partition", "Int32"),
    ("offset", "Int64"),
    ("type", "LowCardinality(String)"),
    ("schema_id", "Int32"),
    ("size", "Int32"),
    ("fenced", "UInt8"),
    ("decode_error", "String"),
    ("raw_value", "String"),
    ("ingested_at", "DateTime64(3, 'UTC') DEFAULT now64(3)"),
)

# The envelope of every record (runtime.log.records.events.Record); same names as the Avro fields, but for
# run_id (the Kafka key) and schema_version (the registry version of the frame's writer schema id
# under the record's subject): the sink fills those two from the Kafka record, not the Avro value.
ENVELOPE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "String"),
    ("seq", "Int64"),
    ("schema_version", "Int32"),
    ("occurred_at", "DateTime64(3, 'UTC')"),
    ("worker", "LowCardinality(String)"),
    ("epoch", "Int64"),
)

SINK_COLUMN_NAMES = frozenset(name for name, _ in SINK_COLUMNS)
ENVELOPE_NAMES = tuple(name for name, _ in ENVELOPE_COLUMNS)

# The event types the views and queries name; kept here so a rename shows up in one place (the
# run statuses and the events that set them are runtime.log.records.status's).
CLAIM_TYPE = "EpochClaimed"


def quote_identifier(name: str) -> str:
    """Back-quote a column or table name for ClickHouse SQL."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def quote_string(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
