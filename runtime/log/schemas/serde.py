"""The one seam between typed records and the Confluent wire format.

Writing: confluent-kafka's ``AvroSerializer`` with the local schema, the subject chosen by
TopicRecordNameStrategy, and ``auto.register.schemas=False`` -- a producer never invents a
schema version; ``agentlog schemas register`` is the only way in.

Reading: the writer's schema id (bytes 1-4 of the frame) is resolved through the registry to
the writer schema; fastavro resolves it to the *local* reader schema of the same record name,
so code reads every version ever written with the shape it knows.

What the Avro value holds (not the run id, not the schema version) is :mod:`runtime.log.schemas.datum`'s;
where ids and writer schemas come from -- the registry, or the schema cache in an outage -- is
:mod:`runtime.log.schemas.resolver`'s.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastavro import parse_schema, schemaless_writer

from runtime.config import Settings
from runtime.errors import RetryableError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import RECORD_TYPES, Record
from runtime.log.records.sealed_form import CONTENT_FIELDS
from runtime.log.schemas.avro_encoder import Unencodable, compile_record
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, LocalSchema, load_catalog
from runtime.log.schemas.datum import DecodeError, Reader, read_datum, record_to_dict, schema_id_of
from runtime.log.schemas.envelope import Truncated, epoch_of, leads_with_envelope
from runtime.log.schemas.frame import HEADER_SIZE, ID_SLICE, MAGIC, frame_header, is_framed
from runtime.log.schemas.frame import schema_id_of as frame_schema_id
from runtime.log.schemas.registry import LookupUnavailable, RegistryUnreachable, is_not_found
from runtime.log.schemas.resolver import SchemaResolver
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer

# The registry client is imported where it is first used, not here: its import is heavy
# (see runtime.log.schemas.registry), and a recovering worker does not need it to start.
if TYPE_CHECKING:
    from runtime.log.schemas.registry_client import AvroSerializer, SchemaRegistryClient


class SchemaNotRegistered(RetryableError):
    """A record's schema, as this code has it, is not registered under its subject. Retryable:
    a worker stops before the command is committed, and handles it again once an operator has
    run ``agentlog schemas register`` -- a valid submission is not rejected for a late
    registration."""

    def __init__(self, record: str, subject: str, detail: str) -> None:
        super().__init__(
            f"the schema of {record} is not registered under subject {subject!r} (registry: {detail}); "
            "register this code's schemas first: `agentlog schemas check`, then `agentlog schemas "
            "register` (see docs/upgrades.md)"
        )
        self.record, self.subject = record, subject


class Serde:
    """Encodes and decodes every record type of ``schemas/`` for one deployment."""

    def __init__(
        self,
        settings: Settings,
        client: SchemaRegistryClient | None = None,
        schema_dir: Path = DEFAULT_SCHEMA_DIR,
    ) -> None:
        self.settings = settings
        self.resolver = SchemaResolver(settings, client)
        self.catalog: dict[str, LocalSchema] = load_catalog(schema_dir)
        self._serializers: dict[str, AvroSerializer] = {}
        self._names_by_id: dict[int, str] = {}
        # record name -> its compiled encoder (None: the schema needs fastavro), made on first use
        self._compiled: dict[str, Callable[..., bytes] | None] = {}
        self._writers: dict[str, tuple[bytes, Any]] = {}  # record name -> (magic + schema id, parsed schema)
        self._readers: dict[int, Reader] = {}  # schema id -> how to read the records it wrote
        # Schema id -> its record name if its datum leads with the envelope (``peek``), else "".
        self._peekable: dict[int, str] = {}
        self._lock = threading.Lock()
        self._warming: threading.Thread | None = None
        self._offline = False
        # Seals content fields on the way out and opens them on the way in (Settings.seal_contents):
        # this is the one place records become bytes and back, so nothing else sees ciphertext.
        self.sealer: Sealer | None = None

    def seal_over(self, log: EventLog) -> Serde:
        """Seal content fields under keys kept in ``log``'s keys topic, if the deployment says so
        (``Settings.seal_contents``); once per serde, whoever calls first (a client and a worker
        sharing one, in-process). Returns this serde."""
        if self.settings.seal_contents and self.sealer is None:
            self.sealer = Sealer(KeyStore(log, self.settings.keys_topic, self.settings.partitions))
        return self

    @property
    def client(self) -> SchemaRegistryClient:
        """The registry client, built on first use (see ``SchemaResolver.client``)."""
        return self.resolver.client

    # -- writing ---------------------------------------------------------------------------------
    def topic_of(self, record: Record) -> str:
        return self.catalog[record.type].topic(self.settings)

    def encode(self, record: Record) -> bytes:
        """Confluent wire format. The first record of each type goes through ``AvroSerializer``,
        which finds the schema id in the registry (and refuses an unregistered schema); after
        that the same bytes are written by fastavro directly with the cached id -- the
        serializer's per-call machinery (subject strategy, rule engine) is skipped per record --
        and by the type's compiled encoder (runtime.log.schemas.avro_encoder, the same bytes) where the
        schema allows one."""
        name = type(record).__name__  # ``record.type``, without the property's call
        fast = self._writers.get(name)
        if fast is None:
            return self._encode_first(self.sealer.seal(record) if self.sealer is not None else record)
        header, parsed = fast
        try:
            compiled = self._compiled[name]
        except KeyError:
            compiled = self._compiled[name] = compile_record(
                self.catalog[name].parsed, type(record), CONTENT_FIELDS.get(name, ())
            )
        if compiled is not None:
            try:
                return header + compiled(record, self.sealer)  # the contents sealed as they are written
            except Unencodable:
                pass  # a value of another Python type than the schema's: fastavro converts or refuses it
        if self.sealer is not None:
            record = self.sealer.seal(record)
        out = io.BytesIO()
        out.write(header)
        schemaless_writer(out, parsed, record_to_dict(record))
        return out.getvalue()

    def _encode_first(self, record: Record) -> bytes:
        if self._await_warm_up() and record.type in self._writers:
            return self.encode(record)
        name = record.type
        schema = self.catalog[name]
        subject = schema.subject(self.settings)
        resolver = self.resolver
        cached = resolver.cache.writer(subject, schema.text) if resolver.down() else None
        if cached is not None:
            self._adopt(name, *cached)
            return self.encode(record)
        try:
            if self._looked_up(name, subject):
                return self.encode(record)
        except RegistryUnreachable as error:
            resolver.unreachable(error)
            return self._encode_cached(record, subject, error)
        from runtime.log.schemas.registry_client import (
            MessageField,
            SchemaRegistryError,
            SerializationContext,
        )

        try:
            serializer = self._serializers.get(name) or self._serializer(name)
            data = serializer(record, SerializationContext(schema.topic(self.settings), MessageField.VALUE))
        except SchemaRegistryError as error:
            if is_not_found(error):
                raise SchemaNotRegistered(name, subject, str(error)) from error
            if not resolver.unreachable(error):
                raise
            return self._encode_cached(record, subject, error)
        except Exception as error:
            if not resolver.unreachable(error):
                raise
            return self._encode_cached(record, subject, error)
        assert data is not None
        data = bytes(data)
        parsed = parse_schema(schema.parsed)
        self._writers[name] = (data[:HEADER_SIZE], parsed)
        resolver.remember_writer(name, subject, schema.text, frame_schema_id(data))
        return data

    def _looked_up(self, name: str, subject: str) -> bool:
        """Resolve this code's schema of ``name`` with one plain-HTTP lookup and adopt its id;
        False where that cannot decide: the serializer's path then asks. The lookup costs a fresh
        ``agentlog submit`` one round trip instead of importing the registry client (100-200 ms)
        and asking twice. Raises SchemaNotRegistered if the registry answers that the schema is
        not registered under ``subject``, RegistryUnreachable if it does not answer."""
        try:
            found = self.resolver.lookup(subject, self.catalog[name].text)
        except RegistryUnreachable:
            raise
        except LookupUnavailable:
            return False
        if found is None:
            raise SchemaNotRegistered(name, subject, "it has no such schema under the subject")
        self._adopt(name, *found)
        return True

    def _encode_cached(self, record: Record, subject: str, error: BaseException) -> bytes:
        """``record`` written with the id the cache kept for this schema, the registry being down."""
        name = record.type
        self._adopt(name, *self.resolver.cached_writer(name, subject, self.catalog[name].text, error))
        return self.encode(record)

    def _adopt(self, name: str, schema_id: int, version: int) -> None:
        """Use ``schema_id`` for this code's schema of ``name``, to write and to read."""
        parsed = parse_schema(self.catalog[name].parsed)
        # The id names this very schema text, so it is also the writer schema of records
        # carrying the id: one parsed schema serves as writer and reader.
        self._readers.setdefault(schema_id, (RECORD_TYPES[name], parsed, parsed, version))
        self._names_by_id.setdefault(schema_id, name)
        self._writers.setdefault(name, (frame_header(schema_id), parsed))

    def _serializer(self, name: str) -> AvroSerializer:
        from runtime.log.schemas.registry_client import AvroSerializer, topic_record_subject_name_strategy

        with self._lock:
            if name not in self._serializers:
                self._serializers[name] = AvroSerializer(
                    self.client,
                    self.catalog[name].text,
                    record_to_dict,
                    conf={
                        "auto.register.schemas": False,
                        "subject.name.strategy": topic_record_subject_name_strategy,
                    },
                )
            return self._serializers[name]

    def warm_up_in_background(self) -> None:
        """``warm_up`` in a thread (a recovering worker's network waits overlap its imports). A
        first record of a type waits for it rather than taking the slow path: that path imports
        the registry client, which costs more than the whole warm-up."""
        self._warming = threading.Thread(target=self.warm_up, name="agentlog-schema-warm-up", daemon=True)
        self._warming.start()

    def _await_warm_up(self) -> bool:
        """Wait for a background warm-up still running; True if there was one."""
        warming = self._warming
        if warming is None or warming is threading.current_thread():
            return False
        warming.join()
        return True

    def warm_up(self) -> int:
        """Resolve every local schema's id now (one registry lookup each), so the first record of
        each type is written and read on the fast path. A recovering worker calls this in a thread
        while it joins its group: otherwise each first record of a type pays a registry round trip
        on the recovery's critical path. Schemas the registry does not know are left alone -- the
        first encode then refuses them with the registry's own error. Returns how many resolved.

        The lookups go over plain HTTP (``SchemaResolver.writer_ids``), so a worker starts without
        importing the registry client; where that cannot ask (a registry answering an error, say),
        a throwaway client does. Either connection is closed before this returns (a supervisor
        warms a Serde up before forking workers, and no child may inherit an open connection)."""
        wanted = {
            name: local
            for name, local in self.catalog.items()
            if name not in self._writers and name in RECORD_TYPES
        }
        subjects = {name: local.subject(self.settings) for name, local in wanted.items()}
        ids = self.resolver.writer_ids({subjects[name]: wanted[name].text for name in wanted})
        resolved = 0
        for name in wanted:
            found = ids.get(subjects[name])
            if found is None:
                continue
            self._adopt(name, *found)
            resolved += 1
        return resolved

    # -- reading ---------------------------------------------------------------------------------
    def record_name(self, data: bytes) -> str:
        """The record name of the writer schema of ``data`` (asks the registry once per id)."""
        schema_id = schema_id_of(data)
        name = self._names_by_id.get(schema_id)
        if name is None:
            name = str(json.loads(self._writer_text(schema_id, data))["name"])
            self._names_by_id[schema_id] = name
        return name

    def _writer_text(self, schema_id: int, data: bytes) -> str:
        """The text of writer schema ``schema_id`` (see ``SchemaResolver.writer_text``). DecodeError
        if the registry has no such id, or this serde is offline and does not know it."""
        if self._offline:
            raise DecodeError(f"schema id {schema_id} is not in this offline catalog", data)
        text = self.resolver.writer_text(schema_id)
        if text is None:
            raise DecodeError(f"schema id {schema_id} is not in the registry", data)
        return text

    def peek(self, data: bytes) -> tuple[str, int] | None:
        """The record name and fencing epoch of an event's bytes, read without decoding it
        (runtime.log.schemas.envelope); None when this serde has not read its schema id yet, or
        the schema does not lead with the envelope, or the bytes end early -- then ``decode`` it."""
        if len(data) <= HEADER_SIZE or data[0] != MAGIC:
            return None
        schema_id = int.from_bytes(data[ID_SLICE], "big")
        name = self._peekable.get(schema_id)
        if name is None:
            reader = self._readers.get(schema_id)
            if reader is None:
                return None
            cls, writer = reader[0], reader[1]
            name = self._peekable[schema_id] = cls.__name__ if leads_with_envelope(writer) else ""
        if not name:
            return None
        try:
            return name, epoch_of(data, HEADER_SIZE)
        except Truncated:
            return None

    def decode(self, data: bytes, key: bytes | None = None, topic: str | None = None) -> Record:
        """A typed record; the writer schema (by id, from the registry) resolved to the local one.

        ``key`` is the record's Kafka key -- the run id on the commands and events topics (None on
        partition-level records such as claims and checkpoints, whose ``run_id`` is then "").

        The first record of each schema id fetches its writer schema (``_decode_first``); every
        record is resolved by fastavro with the writer and reader schemas cached by id. Sealed
        content fields come back open (``Settings.seal_contents``), or ERASED once their key is gone."""
        record = self._decode(data, key, topic)
        return record if self.sealer is None else self.sealer.open(record)

    def _decode(self, data: bytes, key: bytes | None, topic: str | None) -> Record:
        if len(data) > HEADER_SIZE and data[0] == MAGIC:
            fast = self._readers.get(int.from_bytes(data[ID_SLICE], "big"))
            if fast is not None:
                return read_datum(fast, data, key)
        return self._decode_first(data, key, topic)

    def _decode_first(self, data: bytes, key: bytes | None, topic: str | None) -> Record:
        """The first record of a schema id: resolve the writer schema (the registry's text, the
        cache's in an outage) and its version, keep them, then decode as ``decode`` does."""
        if self._await_warm_up() and is_framed(data) and frame_schema_id(data) in self._readers:
            return self._decode(data, key, topic)
        schema_id = schema_id_of(data)
        text = self._writer_text(schema_id, data)
        try:
            writer = json.loads(text)
            parsed_writer = parse_schema(writer)
        except Exception as exc:
            raise DecodeError(f"writer schema id {schema_id} cannot be parsed: {exc}", data) from exc
        name = str(writer.get("name", ""))
        cls = RECORD_TYPES.get(name)
        if cls is None or name not in self.catalog:
            raise DecodeError(f"record type {name!r} (schema id {schema_id}) is unknown to this code", data)
        schema = self.catalog[name]
        topic = topic or schema.topic(self.settings)
        full_name = ".".join(part for part in (writer.get("namespace"), writer.get("name")) if part)
        subject = f"{topic}-{full_name}"
        version = self.resolver.version(schema_id, subject)
        self._names_by_id.setdefault(schema_id, name)
        self._readers[schema_id] = (cls, parsed_writer, parse_schema(schema.parsed), version)
        self.resolver.cache.remember_id(schema_id, text, subject, version)
        return read_datum(self._readers[schema_id], data, key)

    @classmethod
    def offline(cls, settings: Settings) -> Serde:
        """A serde that never asks a registry: each local schema gets the id of its place in the
        catalog (1, 2, ... by record name). For the in-memory log (``runtime.local``, unit tests),
        whose records never leave the process; a Kafka deployment always uses the registry's ids.
        Each schema is the first and only version of its subject: records read as version 1."""
        serde = cls(settings)
        serde._offline = True
        for schema_id, name in enumerate(sorted(n for n in serde.catalog if n in RECORD_TYPES), start=1):
            parsed = parse_schema(serde.catalog[name].parsed)
            serde._readers[schema_id] = (RECORD_TYPES[name], parsed, parsed, 1)
            serde._names_by_id[schema_id] = name
            serde._writers[name] = (frame_header(schema_id), parsed)
        return serde
