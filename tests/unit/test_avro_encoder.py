"""The compiled Avro encoders write exactly fastavro's bytes, for every record type of the catalog."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import itertools
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import RECORD_TYPES
from runtime.log.records.sealed_form import CONTENT_FIELDS, is_sealed
from runtime.log.schemas.avro_encoder import Unencodable, compile_record
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, load_catalog
from runtime.log.schemas.datum import record_to_dict
from runtime.log.schemas.frame import HEADER_SIZE
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer

pytestmark = pytest.mark.unit

CATALOG = load_catalog(DEFAULT_SCHEMA_DIR)
LONGS = [0, 1, -1, 63, -64, 64, -65, 4095, -4096, 4096, 1_700_000_000_123, -(1 << 63), (1 << 63) - 1]
INTS = [0, 1, -1, 300, -(1 << 31), (1 << 31) - 1]
STRINGS = ["", "a", "order 48211, step 7", "é✓ — ünïcode", "x" * 300]


def _values(schema: Any) -> list[Any]:
    """Values of every shape the schema admits: small and large, empty and not."""
    if isinstance(schema, list):
        others = [s for s in schema if s != "null"]
        return [None, *_values(others[0])]
    kind = schema if isinstance(schema, str) else schema["type"]
    if kind == "long":
        return LONGS
    if kind == "int":
        return INTS
    if kind == "string":
        return STRINGS
    if kind == "boolean":
        return [True, False]
    if kind == "bytes":
        return [b"", b"\x20" * 16, bytes(range(256)) * 2]
    if kind == "array":
        items = _values(schema["items"])
        return [[], items[:1], items[:3], items * 50]
    if kind == "map":
        values = _values(schema["values"])
        return [{}, {"k": values[0]}, {f"key {i}": v for i, v in enumerate(values)}]
    raise AssertionError(f"a schema type the test does not know: {schema}")


def _records(name: str) -> list[Any]:
    schema = CATALOG[name].parsed
    cls = RECORD_TYPES[name]
    columns = [_values(field["type"]) for field in schema["fields"]]
    names = [field["name"] for field in schema["fields"]]
    rows = []
    for i in range(max(len(c) for c in columns)):
        values = {n: c[i % len(c)] for n, c in zip(names, columns, strict=True)}
        rows.append(cls(**{"run_id": "r", **values}))
    return rows


def _fastavro(parsed: Any, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parsed, record_to_dict(record))
    return out.getvalue()


# Records whose schemas use a type the compiler leaves to fastavro (arrays of bytes): written once
# per checkpoint round, not per step, so not worth compiling.
LEFT_TO_FASTAVRO: set[str] = set()  # HistorySnapshot compiles since bytes do


@pytest.mark.parametrize("name", sorted(n for n in CATALOG if n in RECORD_TYPES))
def test_compiled_encoder_writes_fastavros_bytes(name: str) -> None:
    encode = compile_record(CATALOG[name].parsed, RECORD_TYPES[name])
    if name in LEFT_TO_FASTAVRO:
        assert encode is None, f"{name} compiled although its schema has a type left to fastavro"
        return
    assert encode is not None, f"{name} has no compiled encoder"
    parsed = parse_schema(CATALOG[name].parsed)
    for record in _records(name):
        assert encode(record) == _fastavro(parsed, record), record


def test_a_value_of_another_type_is_left_to_fastavro() -> None:
    name = "ModelCallCompleted"
    encode = compile_record(CATALOG[name].parsed, RECORD_TYPES[name])
    assert encode is not None
    base = _records(name)[0]
    odd_values: dict[str, Any] = {
        "occurred_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),  # fastavro converts it
        "attempt": True,  # a bool is not an int to Avro's writer here
        "position": 1 << 40,  # past an Avro int
        "result": b"bytes",
    }
    for field, value in odd_values.items():
        with pytest.raises(Unencodable):
            encode(dataclasses.replace(base, **{field: value}))


def test_unsupported_schemas_compile_to_none() -> None:
    @dataclasses.dataclass
    class Holder:
        a: Any

    for field_type in ["double", ["null", "string", "long"], {"type": "enum", "name": "E", "symbols": ["X"]}]:
        schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": field_type}]}
        assert compile_record(schema, Holder) is None
    missing = {"type": "record", "name": "R", "fields": [{"name": "b", "type": "long"}]}
    assert compile_record(missing, Holder) is None
    assert list(itertools.islice(_values(["null", "long"]), 2)) == [None, 0]


def test_serde_writes_compiled_and_fallback_records_that_read_back(tmp_path: Any) -> None:
    serde = Serde.offline(Settings(partitions=1, state_dir=tmp_path))
    name = "ModelCallScheduled"
    record = _records(name)[2]
    parsed = parse_schema(CATALOG[name].parsed)
    data = serde.encode(record)
    assert data[HEADER_SIZE:] == _fastavro(parsed, record)
    assert serde.decode(data, b"r") == dataclasses.replace(record, schema_version=1)
    # A datetime is not an Avro long: the compiled encoder declines it and fastavro converts it.
    at = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    converted = serde.encode(dataclasses.replace(record, occurred_at=at))  # type: ignore[arg-type]
    assert serde.decode(converted, b"r").occurred_at == int(at.timestamp() * 1000)


@pytest.mark.parametrize("name", sorted(CONTENT_FIELDS))
def test_content_fields_are_written_sealed_when_the_encoder_is_given_a_sealer(name: str) -> None:
    # The serde's sealed records: every content field's text (each message of a list too) is
    # written as a value its run's key opens, every other field as fastavro writes it.
    fields = CONTENT_FIELDS[name]
    encode = compile_record(CATALOG[name].parsed, RECORD_TYPES[name], fields)
    assert encode is not None
    parsed = parse_schema(CATALOG[name].parsed)
    settings = Settings(partitions=1)
    sealer = Sealer(KeyStore(MemoryLog(settings), settings.keys_topic, 1))
    # Times within datetime's range: the test reads the records back with fastavro.
    times = {f["name"]: 0 for f in CATALOG[name].parsed["fields"] if "timestamp" in str(f["type"])}
    for record in (dataclasses.replace(r, **times) for r in _records(name)):
        assert encode(record) == _fastavro(parsed, record)  # no sealer: in the clear
        written = schemaless_reader(io.BytesIO(encode(record, sealer)), parsed, parsed)
        for field in fields:
            plain, sealed = getattr(record, field), written[field]
            if isinstance(plain, list):
                assert [sealer.open_text(item, field, "r") for item in sealed] == plain
                assert all(is_sealed(item) for item, text in zip(sealed, plain, strict=True) if text)
            else:
                assert sealer.open_text(sealed, field, "r") == plain if plain is not None else sealed is None
                assert is_sealed(sealed) if plain else sealed == plain
        clear = {f: written[f] for f in fields}
        assert _fastavro(parsed, dataclasses.replace(record, **clear)) == encode(
            dataclasses.replace(record, **clear), sealer
        ), "a value already sealed under its key is written as it is"
