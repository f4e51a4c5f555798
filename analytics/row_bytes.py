"""A store row turned back into the bytes it was decoded from: the writer schema of its
``schema_id`` encodes the row's columns, and Avro has one encoding per value. What the chain's and
the signatures' checks of stored rows rest on (analytics.verify, analytics.vouched)."""

from __future__ import annotations

import io
import json
from typing import Any

from fastavro import parse_schema, schemaless_writer

from runtime.log.records.chain import LINK_SIZE
from runtime.log.schemas.frame import frame_header


def datum(schema: Any, value: Any) -> Any:
    """A store column's value (as a query returns it) as the Avro value of ``schema``."""
    if isinstance(schema, list):
        if value is None and "null" in schema:
            return None
        other = [s for s in schema if s != "null"]
        return datum(other[0], value) if len(other) == 1 else value
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, (dict, list)):
        return datum(kind, value)
    if kind in ("int", "long"):
        return int(value)
    if kind == "boolean":
        return bool(value)
    if kind == "string":
        return str(value)
    if kind == "bytes":
        return b""  # ``chain`` (the bytes before it are what its link covers); ``signature`` is put back
    if kind == "array":
        return [datum(schema["items"], item) for item in value]
    if kind == "map":
        return {str(k): datum(schema["values"], v) for k, v in dict(value).items()}
    return value


def reencoded(
    writer_text: str, schema_id: int, event: dict[str, Any], link: bytes, signature: bytes = b""
) -> bytes:
    """The framed Avro value the row was decoded from (its signature and link put back in)."""
    writer = json.loads(writer_text)
    fields = {f["name"]: datum(f["type"], event.get(f["name"])) for f in writer["fields"]}
    if "signature" in fields:
        fields["signature"] = signature
    out = io.BytesIO()
    out.write(frame_header(schema_id))
    schemaless_writer(out, parse_schema(writer), fields)
    value = out.getvalue()
    if not link:
        return value
    return value[:-1] + bytes((LINK_SIZE * 2,)) + link
