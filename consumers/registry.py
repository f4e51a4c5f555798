"""Writer schemas by id, from the schema registry, fetched once per id.

The sink stores what the writer wrote, so it reads every record with the writer's own schema
(the id in the frame, runtime.log.schemas.frame), never a local reader schema: a field added in a later
version lands even if this code has never heard of it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from runtime.errors import RetryableError
from runtime.log.schemas.registry import schema_by_id, version_under
from runtime.log.schemas.registry_client import SchemaRegistryClient, SchemaRegistryError


class RegistryUnavailable(RetryableError):
    """The registry did not answer; the batch waits and is retried."""


class WriterSchemas:
    """Parsed writer schemas by id; ``None`` for an id the registry does not know (or not Avro)."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self.client = client
        self._cache: dict[int, tuple[dict[str, Any], str] | None] = {}
        self._versions: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> tuple[dict[str, Any], str] | None:
        """(parsed schema, schema text) of ``schema_id``, or None if it cannot describe a record."""
        with self._lock:
            if schema_id in self._cache:
                return self._cache[schema_id]
        try:
            schema = schema_by_id(self.client, schema_id)
        except SchemaRegistryError as exc:
            raise RegistryUnavailable(f"schema registry error for id {schema_id}: {exc}") from exc
        except Exception as exc:  # transport errors surface as the client's httpx exceptions
            raise RegistryUnavailable(f"schema registry unreachable for id {schema_id}: {exc}") from exc
        found = None if schema is None else self._parse(schema.schema_str or "", schema.schema_type)
        with self._lock:
            self._cache[schema_id] = found
        return found

    def version(self, schema_id: int, subject: str) -> int:
        """The registry's version of ``schema_id`` under ``subject`` (0 if not registered there):
        the ``schema_version`` of the records it wrote."""
        with self._lock:
            if (schema_id, subject) in self._versions:
                return self._versions[(schema_id, subject)]
        try:
            version = version_under(self.client, schema_id, subject)
        except SchemaRegistryError as exc:
            raise RegistryUnavailable(f"schema registry error for id {schema_id}: {exc}") from exc
        except Exception as exc:  # transport errors surface as the client's httpx exceptions
            raise RegistryUnavailable(f"schema registry unreachable for id {schema_id}: {exc}") from exc
        with self._lock:
            self._versions[(schema_id, subject)] = version
        return version

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
