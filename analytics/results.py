"""Query results as plain JSON-safe values, the same whether ClickHouse answered in-process or via the sink.

The audit CLI may reach the store directly (a ClickHouse server, or chDB when no sink holds it)
or through the sink's query port. Converting every value to a JSON type at the source means the
two paths cannot drift: a timestamp is always an ISO-8601 UTC string, bytes are text when they
are UTF-8, and so on.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JsonValue = Any  # None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]


def json_safe(value: Any) -> JsonValue:
    """``value`` as a JSON type; timestamps in UTC ISO-8601 with milliseconds."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return raw.hex()
    if isinstance(value, decimal.Decimal | uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    return str(value)


@dataclass(frozen=True)
class QueryResult:
    """Column names, ClickHouse types and rows of JSON-safe values."""

    columns: list[str]
    types: list[str] = field(default_factory=list)
    rows: list[list[JsonValue]] = field(default_factory=list)

    def dicts(self) -> Iterator[dict[str, JsonValue]]:
        for row in self.rows:
            yield dict(zip(self.columns, row, strict=True))

    def to_json(self) -> dict[str, JsonValue]:
        return {"columns": self.columns, "types": self.types, "rows": self.rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryResult:
        return cls(list(data["columns"]), list(data.get("types", [])), [list(r) for r in data["rows"]])

    @classmethod
    def from_rows(
        cls, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> QueryResult:
        return cls(list(columns), list(types), [[json_safe(v) for v in row] for row in rows])
