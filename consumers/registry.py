"""Writer schemas by id, from the schema registry, fetched once per id.

The sink stores what the writer wrote, so it reads every record with the writer's own schema
(the id in bytes 1-4 of the frame), never a local reader schema: a field added in a later
version lands even if this code has never heard of it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from runtime.errors import RetryableError

_NOT_FOUND_CODES = (40403, 40401, 40402)


class RegistryUnavailable(RetryableError):
    """The registry did not answer; the batch waits and is retried."""


class WriterSchemas:
    """Parsed writer schemas by id; ``None`` for an id the registry does not know (or not Avro)."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self.client = client
        self._cache: dict[int, tuple[dict[str, Any], str] | None] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> tuple[dict[str, Any], str] | None:
        """(parsed schema, schema text) of ``schema_id``, or None if it cannot describe a record."""
        with self._lock:
            if schema_id in self._cache:
                return self._cache[schema_id]
        try:
            schema = self.client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404 or exc.error_code in _NOT_FOUND_CODES:
                found = None
            else:
                raise RegistryUnavailable(f"schema registry error for id {schema_id}: {exc}") from exc
        except Exception as exc:  # transport errors surface as requests/httpx exceptions
            raise RegistryUnavailable(f"schema registry unreachable for id {schema_id}: {exc}") from exc
        else:
            found = self._parse(schema.schema_str or "", schema.schema_type)
        with self._lock:
            self._cache[schema_id] = found
        return found

    @staticmethod
    def _parse(text: str, schema_type: str | None) -> tuple[dict[str, Any], str] | None:
        if schema_type not in (None, "AVRO"):
            return None
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            return None
        return parsed, text
