"""Writes a batch into ``agentlog.events`` as one atomic, deduplicated insert, fencing included.

Order of a write (each step safe to repeat, so a failed write is simply retried):

1. empty the stage (a Memory table private to this sink);
2. per writer schema id: resolve the schema (registry, cached), add columns for fields the table
   lacks (derived migration), and insert the group's staged datums as one Avro container --
   ClickHouse decodes; records it cannot decode are found with fastavro and staged as
   undecodable instead;
3. per partition, the watermark after the batch and whether any record can be fenced at all
   (one aggregate over the stage);
4. one ``INSERT INTO events SELECT ... FROM stage`` with ``insert_deduplication_token``: a
   single block, hence a single part, hence all-or-nothing; a retry after an ambiguous failure
   is dropped by the token. The schema id and record type of each row are read there from its
   Confluent frame, the Kafka coordinates from its header;
5. advance the fencing watermarks; empty the stage.

Resume state is read back from the events table itself (highest offset and watermark per
partition), because the position lives in the same rows as the data.

Fencing is the rule of ``runtime.log.records.fencing.FenceFilter`` in SQL: the watermark before a record is
the maximum, over earlier records of the partition, of (a claim's offset, else the epoch); a
non-claim whose epoch is below it is fenced. Folding fenced records into that maximum changes
nothing -- their epoch is already below it -- which is what lets a window function compute it
(the running maximum may include the record's own epoch: ``e < max(w, e)`` iff ``e < w``).
The watermark before the batch comes from the previous batches, or from the store on start.
With the workers' public key a claim no worker signed raises nothing and is stored fenced
(consumers.claims), as ``FenceFilter(claims=...)`` reads it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import fastavro
from clickhouse_connect.driver.client import Client

from analytics.migrations import migrate, table_columns
from analytics.tables import CLAIM_TYPE, DATABASE, EVENTS, WRITER_SCHEMAS, quote_identifier, quote_string
from runtime.log.schemas.frame import HEADER_SIZE, ID_SIZE

from . import rowbinary
from .avro_wire import container
from .batch import META, Batch, SinkRecord, Undecodable, staged_body
from .claims import StoreClaims, positions_sql
from .columns import (
    FRAME_COLUMN,
    META_COLUMN,
    STAGE_ONLY_COLUMNS,
    ColumnPlan,
    normalize_type,
    plan_columns,
)
from .registry import WriterSchemas

log = logging.getLogger("agentlog.sink.writer")

# Not staged: filled by the final INSERT ... SELECT (topic, fenced) or by default (ingested_at).
_NOT_STAGED = ("topic", "fenced", "ingested_at")
# Staged, but in the stage's header column (META_COLUMN) rather than columns of their own.
_FROM_META = ("partition", "offset", "size")
_UNDECODABLE_COLUMNS = [
    META_COLUMN,
    "schema_id",
    "type",
    "run_id",
    "decode_error",
    "raw_value",
]


# What a record contributes to its partition's watermark; undecodable records contribute nothing,
# nor does a forged claim (consumers.claims): ``forged`` is SQL true for those.
def _watermark_term(forged: str = "0") -> str:
    return f"multiIf(type = '{CLAIM_TYPE}', if({forged}, toInt64(-1), offset), decode_error != '', toInt64(-1), epoch)"


# In the store a forged claim is the only fenced claim (consumers.claims).
_STORED_WATERMARK_TERM = _watermark_term("fenced != 0")
# The writer schema id in bytes 1-4 (big-endian) of the Confluent frame.
_FRAME_SCHEMA_ID = f"toInt32(reinterpretAsUInt32(reverse(substring({FRAME_COLUMN}, 2, {ID_SIZE}))))"
# Partition, offset and value size from the staged header (consumers.batch.META: little-endian).
_META_FIELDS = (
    f"reinterpretAsInt32(substring({META_COLUMN}, 1, 4)) AS partition, "
    f"reinterpretAsInt64(substring({META_COLUMN}, 5, 8)) AS offset, "
    f"reinterpretAsInt32(substring({META_COLUMN}, 13, 4)) AS size"
)
# One block -> one part -> an atomic insert (batches are far below these sizes).
_ATOMIC_INSERT = {
    "max_insert_threads": "1",
    "min_insert_block_size_rows": "100000000",
    "min_insert_block_size_bytes": "0",
    "max_insert_block_size": "100000000",
}


@dataclass(frozen=True)
class SinkState:
    """What the store already holds for a topic: next offset and fencing watermark per partition."""

    next_offsets: dict[int, int]
    watermarks: dict[int, int]


@dataclass(frozen=True)
class WriteStats:
    rows: int
    undecodable: int


@dataclass(frozen=True)
class _PartitionMarks:
    after: int  # the partition's fencing watermark once the batch is in
    unfenced: bool  # no record of the partition's batch can be fenced (see _partition_marks)
    claims: bool = False  # the partition's batch holds a claim


class _GroupRejected(Exception):
    """The store refused one schema group's container (kept apart to look for corrupt datums)."""

    def __init__(self, plan: ColumnPlan, records: Sequence[SinkRecord], cause: Exception) -> None:
        super().__init__(str(cause))
        self.plan = plan
        self.records = records
        self.cause = cause


class StoreWriter:
    """Owns the events table and this sink's stage table for one topic."""

    def __init__(
        self, client: Client, topic: str, schemas: WriterSchemas, claims: StoreClaims | None = None
    ) -> None:
        self.client = client
        self.claims = claims  # with the workers' public key: forged claims fence nothing
        self.topic = topic
        self.schemas = schemas
        self.stage = f"{DATABASE}._stage_{_topic_slug(topic)}"
        self._columns: dict[str, str] = {}
        self._plans: dict[int, ColumnPlan | None] = {}
        self._versions: dict[int, int] = {}  # schema id -> its registry version under its subject
        self.watermarks: dict[int, int] = {}

    # -- start --------------------------------------------------------------------------------
    def prepare(self) -> SinkState:
        """Migrate the store, (re)create the stage, and read where this topic stands."""
        migrate(self.client)
        self._columns = table_columns(self.client, EVENTS)
        self.reset_stage()
        rows = self.client.query(
            f"SELECT partition, max(offset), max({_STORED_WATERMARK_TERM}) FROM {EVENTS} "
            "WHERE topic = {topic:String} GROUP BY partition",
            parameters={"topic": self.topic},
        ).result_rows
        next_offsets = {int(p): int(o) + 1 for p, o, _ in rows}
        self.watermarks = {int(p): int(w) for p, _, w in rows}
        if self.claims is not None:
            self.claims.load(self.client, self.topic)
        return SinkState(next_offsets, dict(self.watermarks))

    def reset_stage(self) -> None:
        """Drop and recreate the stage with the events table's columns (the retry path uses this too)."""
        self.client.command(f"DROP TABLE IF EXISTS {self.stage}")
        columns = [
            f"{quote_identifier(name)} {_stage_type(ch_type)}"
            for name, ch_type in self._columns.items()
            if name not in _NOT_STAGED and name not in _FROM_META
        ]
        columns += [f"{quote_identifier(name)} {ch_type}" for name, ch_type in STAGE_ONLY_COLUMNS]
        self.client.command(f"CREATE TABLE {self.stage} ({', '.join(columns)}) ENGINE = Memory")

    # -- write --------------------------------------------------------------------------------
    def write(self, batch: Batch, token: str) -> WriteStats:
        """Write ``batch`` atomically; safe to call again with the same batch and token."""
        plans = self._plans_for([int.from_bytes(sid, "big") for sid in batch.groups])
        excluded: dict[tuple[int, int], Undecodable] = {}
        while True:
            self.client.command(f"TRUNCATE TABLE IF EXISTS {self.stage}")
            try:
                undecodable = self._stage_batch(batch, plans, excluded)
                break
            except _GroupRejected as rejected:
                bad = self._find_undecodable(rejected.plan, rejected.records)
                if not bad:
                    raise rejected.cause from None  # every datum decodes: the store failed, retry the batch
                log.warning(
                    "schema id %s: %d record(s) do not decode (%s); storing them as undecodable",
                    rejected.plan.schema_id,
                    len(bad),
                    rejected.cause,
                )
                excluded.update({(u.partition, u.offset): u for u in bad})
        if undecodable:
            self._stage_undecodable(undecodable)
        marks = self._partition_marks()
        forged, seen = "0", dict[int, set[bytes]]()
        if self.claims is not None and any(m.claims for m in marks.values()):  # rare: a takeover
            positions, seen = self.claims.check(self.client, self._staged_rows())
            forged = positions_sql(positions)
            marks = self._partition_marks(forged)
        self._commit_stage(token, fencing=any(not m.unfenced for m in marks.values()), forged=forged)
        if self.claims is not None:
            self.claims.note(seen)
        for partition, mark in marks.items():  # only once the batch is in
            self.watermarks[partition] = max(self.watermarks.get(partition, -1), mark.after)
        self.client.command(f"TRUNCATE TABLE IF EXISTS {self.stage}")
        return WriteStats(batch.count, len(undecodable))

    def _stage_batch(
        self,
        batch: Batch,
        plans: Mapping[int, ColumnPlan | None],
        excluded: Mapping[tuple[int, int], Undecodable],
    ) -> list[Undecodable]:
        undecodable = list(batch.undecodable) + list(excluded.values())
        for sid_bytes, group in batch.groups.items():
            schema_id = int.from_bytes(sid_bytes, "big")
            plan = plans[schema_id]
            if plan is None:
                reason = f"schema id {schema_id} is not an Avro record schema in the registry"
                undecodable += [Undecodable(p, o, k, v, schema_id, reason) for p, o, k, v in group.records()]
                continue
            records: Sequence[SinkRecord] | None = None  # only the rare paths need them
            if excluded:
                records = [r for r in group.records() if (r[0], r[1]) not in excluded]
                body, count = staged_body(records), len(records)
            else:
                body, count = group.body(), group.count
            if not count:
                continue
            blob = container(plan.staged_schema, body, count)
            try:
                self.client.raw_insert(self.stage, plan.insert_columns, blob, fmt="Avro")
            except Exception as exc:  # a store error or a datum ClickHouse cannot parse: the caller tells
                raise _GroupRejected(plan, records or list(group.records()), exc) from exc
        return undecodable

    def _plans_for(self, schema_ids: Sequence[int]) -> dict[int, ColumnPlan | None]:
        """The column plan of each schema id; the first time an id is seen, its derived migration
        runs and its writer schema is recorded (one insert for all of a batch's new ids)."""
        new: dict[int, ColumnPlan | None] = {}
        rows: list[tuple[object, ...]] = []
        for schema_id in schema_ids:
            if schema_id in self._plans or schema_id in new:
                continue
            found = self.schemas.get(schema_id)
            if found is None:
                new[schema_id] = None
                continue
            writer, text = found
            plan = plan_columns(schema_id, writer, self._columns)
            self._versions[schema_id] = self.schemas.version(schema_id, f"{self.topic}-{plan.full_name}")
            self._add_columns(plan.new_columns(self._columns))
            new[schema_id] = plan
            fields = [f.field for f in plan.fields]
            rows.append(
                (schema_id, plan.record, plan.full_name, fields, [f.column or "" for f in plan.fields], text)
            )
        if rows:
            names = ["schema_id", "record", "full_name", "fields", "columns", "definition"]
            body = "".join(json.dumps(dict(zip(names, row, strict=True))) + "\n" for row in rows)
            self.client.raw_insert(WRITER_SCHEMAS, names, body.encode(), fmt="JSONEachRow")
        self._plans.update(new)
        return {schema_id: self._plans[schema_id] for schema_id in schema_ids}

    def _add_columns(self, columns: Sequence[tuple[str, str]]) -> None:
        """The derived migration: a column for a field first seen in a writer schema."""
        for name, ch_type in columns:
            for table, column_type in ((EVENTS, ch_type), (self.stage, _stage_type(ch_type))):
                self.client.command(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {quote_identifier(name)} {column_type}"
                )
            self._columns[name] = ch_type
            log.info("added column %s %s to %s for a new schema field", name, ch_type, EVENTS)

    def _find_undecodable(self, plan: ColumnPlan, records: Sequence[SinkRecord]) -> list[Undecodable]:
        found = self.schemas.get(plan.schema_id)
        assert found is not None
        parsed = fastavro.parse_schema(found[0])
        bad: list[Undecodable] = []
        for partition, offset, key, value in records:
            reader = io.BytesIO(value)
            reader.seek(HEADER_SIZE)
            try:
                fastavro.schemaless_reader(reader, parsed, None)
                if reader.tell() != len(value):
                    raise ValueError(f"{len(value) - reader.tell()} bytes after the datum")
            except Exception as exc:  # fastavro raises many types for corrupt input
                reason = f"cannot decode with writer schema {plan.schema_id}: {exc}"
                bad.append(Undecodable(partition, offset, key, value, plan.schema_id, reason))
        return bad

    def _stage_undecodable(self, records: Sequence[Undecodable]) -> None:
        body = rowbinary.rows(
            (
                rowbinary.fixed(META.pack(u.partition, u.offset, len(u.value or b"")), META.size),
                rowbinary.int32(u.schema_id),
                rowbinary.string(b""),  # type
                rowbinary.string(u.key or b""),  # run_id: the key, as stored for decoded rows
                rowbinary.string(u.reason),
                rowbinary.string(u.value or b""),
            )
            for u in records
        )
        self.client.raw_insert(self.stage, _UNDECODABLE_COLUMNS, body, fmt="RowBinary")

    def _staged_rows(self) -> str:
        """The stage as rows of the events table: Kafka coordinates and size from the header,
        and each decoded row's schema id, type and schema version from its frame (the version is
        the registry's, of the writer schema under its subject: no Avro field carries it)."""
        plans = [p for p in self._plans.values() if p is not None]
        if plans:
            ids = ", ".join(str(p.schema_id) for p in plans)
            names = ", ".join(quote_string(p.record) for p in plans)
            versions = ", ".join(str(self._versions.get(p.schema_id, 0)) for p in plans)
            type_of = f"transform({_FRAME_SCHEMA_ID}, CAST([{ids}] AS Array(Int32)), CAST([{names}] AS Array(String)), '')"
            version_of = f"transform({_FRAME_SCHEMA_ID}, CAST([{ids}] AS Array(Int32)), CAST([{versions}] AS Array(Int32)), 0)"
        else:
            type_of, version_of = "''", "0"
        return (
            f"(SELECT * EXCEPT ({FRAME_COLUMN}, {META_COLUMN}) REPLACE ("
            f"if(decode_error = '', {_FRAME_SCHEMA_ID}, schema_id) AS schema_id, "
            f"if(decode_error = '', {type_of}, type) AS type, "
            f"if(decode_error = '', {version_of}, schema_version) AS schema_version), "
            f"{_META_FIELDS} FROM {self.stage})"
        )

    def _partition_marks(self, forged: str = "0") -> dict[int, _PartitionMarks]:
        """Per partition of the staged batch: the watermark after it, and whether the fencing
        window can be skipped.

        It can when the partition's batch holds no claim and its decoded records all carry one
        epoch, at or above the watermark before the batch: then the running watermark never
        exceeds that epoch and nothing is fenced. That is every batch of a partition whose
        worker did not change, so the window (a sort of the batch) runs only after a takeover.
        """
        decoded = "decode_error = ''"
        claim = f"type = '{CLAIM_TYPE}'"
        rows = self.client.query(
            f"SELECT partition, max({_watermark_term(forged)}), countIf({decoded} AND {claim}), "
            f"minIf(epoch, {decoded} AND NOT {claim}), maxIf(epoch, {decoded} AND NOT {claim}) "
            f"FROM {self._staged_rows()} GROUP BY partition"
        ).result_rows
        marks: dict[int, _PartitionMarks] = {}
        for partition, after, claims, low, high in rows:
            p = int(partition)
            before = self.watermarks.get(p, -1)
            unfenced = int(claims) == 0 and int(low) == int(high) and int(low) >= before
            marks[p] = _PartitionMarks(int(after), unfenced, int(claims) > 0)
        return marks

    def _commit_stage(self, token: str, fencing: bool, forged: str = "0") -> None:
        staged = [name for name in self._columns if name not in _NOT_STAGED]
        rows = self._staged_rows()
        fenced = f"toUInt8({forged})"
        if fencing:
            # The window runs over five narrow columns and yields the (usually empty) set of
            # fenced records; windowing the whole wide row would sort every column of the batch.
            fenced = (
                f"toUInt8({forged} OR (partition, offset) IN ("
                f"SELECT partition, offset FROM (SELECT partition, offset, type, epoch, decode_error, "
                f"max({_watermark_term(forged)}) OVER (PARTITION BY partition ORDER BY offset "
                f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mark FROM {rows}) "
                f"WHERE type != '{CLAIM_TYPE}' AND decode_error = '' "
                f"AND epoch < greatest({_transform('partition', self.watermarks)}, mark)))"
            )
        names = ", ".join(quote_identifier(n) for n in ["topic", "fenced", *staged])
        select = ", ".join([quote_string(self.topic), fenced, *map(quote_identifier, staged)])
        self.client.command(
            f"INSERT INTO {EVENTS} ({names}) SELECT {select} FROM {rows}",
            settings={"insert_deduplication_token": token, **_ATOMIC_INSERT},
        )


def _stage_type(ch_type: str) -> str:
    """A column's type in the stage: without LowCardinality. The Avro reader fills the stage row
    by row, and a LowCardinality column costs a dictionary lookup per value; dropping it halved
    the staging time of a batch. The final insert builds the dictionaries once, column-wise."""
    return normalize_type(ch_type)


def _transform(column: str, mapping: Mapping[int, int]) -> str:
    """SQL for ``mapping[column]``, -1 where absent (integers only, so rendering is safe)."""
    if not mapping:
        return "toInt64(-1)"
    keys = ", ".join(str(int(k)) for k in mapping)
    values = ", ".join(str(int(v)) for v in mapping.values())
    return (
        f"transform({column}, CAST([{keys}] AS Array(Int32)), CAST([{values}] AS Array(Int64)), toInt64(-1))"
    )


def _topic_slug(topic: str) -> str:
    return hashlib.sha1(topic.encode()).hexdigest()[:10]  # a table name, not a security hash
