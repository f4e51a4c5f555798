"""Field-level differences between two versions of a record schema (pure logic).

The registry decides compatibility; this module explains a verdict in terms a person can act
on: which field, and what changed about it.
"""

from __future__ import annotations

import json
from typing import Any


def _type_text(avro_type: Any) -> str:
    if isinstance(avro_type, str):
        return avro_type
    if isinstance(avro_type, list):
        return "[" + ", ".join(_type_text(t) for t in avro_type) + "]"
    if isinstance(avro_type, dict):
        if "logicalType" in avro_type:
            return f"{avro_type['type']}({avro_type['logicalType']})"
        if avro_type.get("type") in ("map", "array"):
            inner = avro_type.get("values", avro_type.get("items"))
            return f"{avro_type['type']}<{_type_text(inner)}>"
        return str(avro_type.get("name", avro_type.get("type")))
    return json.dumps(avro_type)


def field_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Describe each field added, removed or retyped from ``old`` to ``new``.

    Entries that break FULL compatibility start with ``breaking:``.
    """
    old_fields = {f["name"]: f for f in old.get("fields", [])}
    new_fields = {f["name"]: f for f in new.get("fields", [])}
    changes: list[str] = []
    for name, field in new_fields.items():
        if name not in old_fields:
            if "default" in field:
                changes.append(f"field {name!r} added ({_type_text(field['type'])}, with default)")
            else:
                changes.append(
                    f"breaking: field {name!r} added without a default: old records cannot be read"
                )
    for name, field in old_fields.items():
        if name not in new_fields:
            if "default" in field:
                changes.append(f"field {name!r} removed (it had a default)")
            else:
                changes.append(
                    f"breaking: field {name!r} removed without a default: new records cannot be read by old code"
                )
            continue
        old_type, new_type = _type_text(field["type"]), _type_text(new_fields[name]["type"])
        if old_type != new_type:
            changes.append(f"breaking: field {name!r} changed type {old_type} -> {new_type}")
    return changes


def breaking_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [c.removeprefix("breaking: ") for c in field_changes(old, new) if c.startswith("breaking:")]
