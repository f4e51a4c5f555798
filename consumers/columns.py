"""Which ClickHouse column holds each field of a writer schema, and the staged-row schema built from it.

Every writer schema ever registered must land (events are kept forever and the schemas evolve
under FULL_TRANSITIVE). A field maps to the column of its own name; a field the table has no
column for yet gets one through a *derived migration* (``ALTER TABLE ... ADD COLUMN IF NOT
EXISTS``), so a new optional field becomes a new column without anyone editing the sink. Two
rules keep that total and deterministic:

- a field whose name is one of the sink's own columns (``partition``, ``type``...) is stored as
  ``record_<name>``;
- a field whose type differs from an existing column of the same name is stored as
  ``<name>__<type>`` instead of failing the batch.

Fields ClickHouse cannot take from Avro as a column (nested records, unions of several types)
get no column; their bytes are still read past, and the record still lands.

The run id comes from the Kafka key, never from the value: the key is the run id of every
record (null, stored as '', on partition-level records such as claims), and writer schemas since
the key-only change no longer carry a ``run_id`` field. Older writer schemas that do are read
past it (their value always equals the key), so every version fills the column the same way.

The *staged row* schema is the writer schema with the sink's metadata fields (the key among
them) and the 5-byte Confluent frame in front. Avro encodes a record as its fields back to
back, so a staged datum is the metadata encodings followed by the untouched Kafka value; field
names are the column names, which is how ClickHouse matches them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analytics.tables import ENVELOPE_COLUMNS, ENVELOPE_NAMES, SINK_COLUMN_NAMES
from runtime.log.schemas.frame import HEADER_SIZE

# Metadata prepended to each datum, in this order (see consumers.batch.staged_head): a fixed
# header (partition, offset and value size, little-endian -- ``consumers.batch.META``), read
# apart in SQL, and the Kafka key as bytes.
META_COLUMN = "_sink_meta"
META_COLUMN_TYPE = "FixedString(16)"
KEY_COLUMN = "run_id"
STAGED_FIELDS: tuple[dict[str, Any], ...] = (
    {"name": META_COLUMN, "type": {"type": "fixed", "name": "AgentlogSinkMeta", "size": 16}},
    {"name": KEY_COLUMN, "type": "bytes"},  # bytes: a key need not be valid UTF-8
)
# The Confluent frame (magic byte + schema id) read as an Avro ``fixed``: the whole Kafka value
# follows the metadata as it is, and the schema id (hence the type) is read from it in SQL. The
# column exists only in the stage.
FRAME_COLUMN = "_confluent_frame"
FRAME_COLUMN_TYPE = f"FixedString({HEADER_SIZE})"
FRAME_FIELD: dict[str, Any] = {
    "name": FRAME_COLUMN,
    "type": {"type": "fixed", "name": "AgentlogSinkConfluentFrame", "size": HEADER_SIZE},
}
# Columns of the stage only, with their types.
STAGE_ONLY_COLUMNS: tuple[tuple[str, str], ...] = (
    (META_COLUMN, META_COLUMN_TYPE),
    (FRAME_COLUMN, FRAME_COLUMN_TYPE),
)
_RESERVED = SINK_COLUMN_NAMES | {FRAME_COLUMN, META_COLUMN}

_PRIMITIVES = {
    "boolean": "Bool",
    "int": "Int32",
    "long": "Int64",
    "float": "Float32",
    "double": "Float64",
    "bytes": "String",
    "string": "String",
}
_LOGICAL = {
    ("long", "timestamp-millis"): "DateTime64(3, 'UTC')",
    ("long", "timestamp-micros"): "DateTime64(6, 'UTC')",
    ("long", "local-timestamp-millis"): "DateTime64(3)",
    ("int", "date"): "Date32",
}
_NOT_NULLABLE = ("Array(", "Map(")


@dataclass(frozen=True)
class FieldColumn:
    """One writer field and where it is stored (column None: not stored)."""

    field: str
    column: str | None
    type: str | None


@dataclass(frozen=True)
class ColumnPlan:
    """How the records of one writer schema land in the events table."""

    schema_id: int
    record: str  # short record name: the ``type`` column
    full_name: str
    fields: tuple[FieldColumn, ...]
    staged_schema: dict[str, Any]

    @property
    def stored(self) -> tuple[FieldColumn, ...]:
        return tuple(f for f in self.fields if f.column is not None)

    def new_columns(self, existing: Mapping[str, str]) -> list[tuple[str, str]]:
        """Columns this plan needs that the table does not have yet."""
        return [
            (f.column, f.type)
            for f in self.fields
            if f.column is not None and f.type is not None and f.column not in existing
        ]

    @property
    def insert_columns(self) -> list[str]:
        """The stage columns an insert of this plan's container fills, in any order."""
        return (
            [str(f["name"]) for f in STAGED_FIELDS]
            + [FRAME_COLUMN]
            + [f.column for f in self.stored if f.column is not None]
        )


def normalize_type(ch_type: str) -> str:
    """Compare column types modulo storage hints (LowCardinality) and spacing."""
    text = re.sub(r"\s+", "", ch_type)
    while True:
        stripped = re.sub(r"LowCardinality\(((?:[^()]|\([^()]*\))*)\)", r"\1", text)
        if stripped == text:
            return text
        text = stripped


def _named_types(schema: Any, namespace: str, found: dict[str, Any]) -> None:
    """Collect named types (records, enums, fixed) by full and short name, for references."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, found)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            ns = schema.get("namespace", namespace)
            name = schema["name"]
            full = name if "." in name else (f"{ns}.{name}" if ns else name)
            found[full] = schema
            found[full.rsplit(".", 1)[-1]] = schema
            for field in schema.get("fields", []):
                _named_types(field.get("type"), ns, found)
        elif kind == "array":
            _named_types(schema.get("items"), namespace, found)
        elif kind == "map":
            _named_types(schema.get("values"), namespace, found)


def clickhouse_type(avro: Any, named: Mapping[str, Any]) -> str | None:
    """The ClickHouse type (before Nullable) that ClickHouse's Avro reader fills from ``avro``; None if none."""
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro]
        if avro == "null":
            return None
        target = named.get(avro)
        return clickhouse_type(target, named) if target is not None else None
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return clickhouse_type(branches[0], named) if len(branches) == 1 else None
    if isinstance(avro, dict):
        kind = avro.get("type")
        logical = avro.get("logicalType")
        if isinstance(kind, str) and logical is not None and (kind, logical) in _LOGICAL:
            return _LOGICAL[(kind, logical)]
        if kind in ("enum", "fixed"):
            return "String"
        if kind == "array":
            inner = clickhouse_type(avro.get("items"), named)
            return f"Array({inner})" if inner and not inner.startswith(_NOT_NULLABLE) else None
        if kind == "map":
            inner = clickhouse_type(avro.get("values"), named)
            return f"Map(String, {inner})" if inner and not inner.startswith(_NOT_NULLABLE) else None
        if kind in ("record", "error"):
            return None
        return clickhouse_type(kind, named)
    return None


def column_type(avro: Any, named: Mapping[str, Any]) -> str | None:
    """The column type for a field: Nullable, because most record types lack any given field."""
    base = clickhouse_type(avro, named)
    if base is None:
        return None
    return base if base.startswith(_NOT_NULLABLE) else f"Nullable({base})"


def _type_slug(ch_type: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", normalize_type(ch_type)).strip("_").lower()


def _place(name: str, ch_type: str, existing: Mapping[str, str], taken: set[str]) -> str:
    column = f"record_{name}" if name in _RESERVED else name
    current = existing.get(column)
    if (current is None or normalize_type(current) == normalize_type(ch_type)) and column not in taken:
        return column
    return f"{column}__{_type_slug(ch_type)}"


def plan_columns(schema_id: int, writer: dict[str, Any], existing: Mapping[str, str]) -> ColumnPlan:
    """Map each field of ``writer`` (a parsed Avro record schema) to a column of the events table.

    ``existing`` is the table's current column -> type; the plan reuses matching columns and
    names the ones a derived migration must add.
    """
    namespace = writer.get("namespace", "")
    named: dict[str, Any] = {}
    _named_types(writer, namespace, named)
    envelope = dict(ENVELOPE_COLUMNS)
    fields: list[FieldColumn] = []
    staged: list[dict[str, Any]] = [*STAGED_FIELDS, FRAME_FIELD]
    taken: set[str] = set()
    for index, field in enumerate(writer.get("fields", [])):
        name = field["name"]
        avro_type = field["type"]
        column: str | None = None
        ch_type: str | None = None
        if name == KEY_COLUMN:
            pass  # filled from the Kafka key (see the module docstring): read past, not stored
        elif name in ENVELOPE_NAMES:
            column, ch_type = name, envelope[name]
        else:
            ch_type = column_type(avro_type, named)
            column = _place(name, ch_type, existing, taken) if ch_type is not None else None
        if column is not None:
            taken.add(column)
        fields.append(FieldColumn(name, column, ch_type))
        staged.append({"name": column if column is not None else f"_unstored_{index}", "type": avro_type})
    staged_schema: dict[str, Any] = {"type": "record", "name": writer.get("name", "Record"), "fields": staged}
    if namespace:
        staged_schema["namespace"] = namespace
    full_name = f"{namespace}.{writer.get('name')}" if namespace else str(writer.get("name"))
    return ColumnPlan(schema_id, str(writer.get("name", "")), full_name, tuple(fields), staged_schema)
