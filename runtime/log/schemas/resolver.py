"""Where a serde's schema ids and writer schemas come from: the registry, else the schema cache.

Every id the registry gives (this code's schemas under their subjects, writer schemas read by
id) is also kept in the state folder (:mod:`runtime.log.schemas.cache`). When the registry cannot
be reached, those kept answers serve instead -- a reader, a fresh ``agentlog submit`` and a cold
worker go on with the schemas the project already knows -- and what is not kept fails with
``RegistryUnreachable``: "schema registry at URL unreachable (...)", never a transport traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runtime.config import Settings
from runtime.log.schemas.cache import SchemaCache, cache_path
from runtime.log.schemas.registry import (
    RegistryUnreachable,
    is_unreachable,
    lookup_registered,
    registry_client,
    schema_by_id,
    schema_ids,
    version_under,
)

# The registry client is imported where it is first used, not here: its import is heavy
# (see runtime.log.schemas.registry), and a recovering worker does not need it to start.
if TYPE_CHECKING:
    from runtime.log.schemas.registry_client import SchemaRegistryClient


logger = logging.getLogger("agentlog.schemas")

# After the registry was found unreachable, the cache answers first for this long: every ask of a
# dead registry costs the client's retries (seconds), once per schema id a cold reader meets.
UNREACHABLE_BACKOFF_S = 30.0


class SchemaResolver:
    """The registry's answers for one deployment, kept in its schema cache as they come, and the
    cache's answers while the registry cannot be reached."""

    def __init__(self, settings: Settings, client: SchemaRegistryClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._client_lock = threading.Lock()
        url = settings.schema_registry_url
        self.cache = SchemaCache(cache_path(settings.state_dir, url), url)
        self._down_until = 0.0  # monotonic time until which the registry is taken to be down

    @property
    def client(self) -> SchemaRegistryClient:
        """The registry client, built on first use: building one loads the CA store, which a recovering worker does in its warm-up thread rather than on its start-up path."""
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = registry_client(self.settings)
                client = self._client
        return client

    def down(self) -> bool:
        """Whether the registry was found unreachable within the last ``UNREACHABLE_BACKOFF_S``."""
        return time.monotonic() < self._down_until

    def unreachable(self, error: BaseException) -> bool:
        """Whether ``error`` says the registry cannot be reached (and remember it for a while)."""
        if not is_unreachable(error):
            return False
        self._down_until = time.monotonic() + UNREACHABLE_BACKOFF_S
        return True

    def _unreachable_error(self, error: BaseException, what: str) -> RegistryUnreachable:
        return RegistryUnreachable(
            self.settings.schema_registry_url, f"{type(error).__name__}: {error}", what
        )

    # -- this code's schemas: the ids to write them with ---------------------------------------------
    def lookup(self, subject: str, text: str) -> tuple[int, int] | None:
        """(id, version) of schema ``text`` under ``subject``, by one plain-HTTP lookup, kept in the
        cache; None if the registry answers that it is not registered there. The registry's answer,
        not the cache, names the id (a registry recreated at the same URL hands out new ones).
        Raises LookupUnavailable where the lookup cannot decide (an answer it cannot read, a URL it
        cannot ask), RegistryUnreachable if the registry does not answer."""
        found = lookup_registered(self.settings.schema_registry_url, [(subject, text)]).get(subject)
        if found is not None:
            self.cache.remember_writer(subject, text, *found)
        return found

    def cached_writer(self, name: str, subject: str, text: str, error: BaseException) -> tuple[int, int]:
        """(id, version) the cache kept for schema ``text`` of record ``name``, the registry being
        down (``error`` says how); RegistryUnreachable if the cache has none."""
        found = self.cache.writer(subject, text)
        if found is None:
            raise self._unreachable_error(
                error,
                f"the id of {name} under subject {subject!r} is not in the schema cache {self.cache.path}",
            ) from error
        logger.warning(
            "schema registry at %s unreachable: %s written with cached schema id %s",
            self.settings.schema_registry_url,
            name,
            found[0],
        )
        return found

    def remember_writer(self, name: str, subject: str, text: str, schema_id: int) -> None:
        """Keep the id (and version) of schema ``text`` of ``name``; the serializer does not tell
        the version, the client's cache of its own lookup does."""
        from runtime.log.schemas.registry_client import Schema

        try:
            registered = self.client.lookup_schema(subject, Schema(text, schema_type="AVRO"))
        except Exception as error:  # only the cache misses out: the record itself is written
            logger.warning("schema %s under %s not kept in the schema cache: %s", name, subject, error)
            return
        self.cache.remember_writer(subject, text, schema_id, int(registered.version or 0))

    def writer_ids(self, schemas: Mapping[str, str]) -> dict[str, tuple[int, int]]:
        """subject -> (id, version) for every schema text of ``schemas`` (subject -> text) that the
        registry knows -- the cache's answers while it cannot be reached. The lookups go over plain
        HTTP (runtime.log.schemas.registry.schema_ids), so a worker starts without importing the
        registry client."""
        try:
            ids = schema_ids(self.settings, schemas.items())
        except Exception as error:
            if not self.unreachable(error):
                raise
            ids = {
                subject: found
                for subject, text in schemas.items()
                if (found := self.cache.writer(subject, text)) is not None
            }
            logger.warning(
                "%s: %d of %d schema ids from the schema cache %s",
                error
                if isinstance(error, RegistryUnreachable)
                else RegistryUnreachable(
                    self.settings.schema_registry_url, f"{type(error).__name__}: {error}"
                ),
                len(ids),
                len(schemas),
                self.cache.path,
            )
        else:
            self.cache.remember(
                writers=[
                    (subject, text, *ids[subject]) for subject, text in schemas.items() if subject in ids
                ]
            )
        return ids

    # -- writer schemas of what is read ----------------------------------------------------------
    def writer_text(self, schema_id: int) -> str | None:
        """The text of writer schema ``schema_id``: the registry's, else the cache's while the
        registry cannot be reached; None if the registry has no such id."""
        cached = self.cache.schema(schema_id) if self.down() else None
        if cached is not None:
            return cached
        try:
            writer = schema_by_id(self.client, schema_id)
        except Exception as error:
            if not self.unreachable(error):
                raise
            text = self.cache.schema(schema_id)
            if text is None:
                raise self._unreachable_error(
                    error, f"writer schema id {schema_id} is not in the schema cache {self.cache.path}"
                ) from error
            return text
        if writer is None:
            return None
        return writer.schema_str or "{}"

    def version(self, schema_id: int, subject: str) -> int:
        """The registry's version of ``schema_id`` under ``subject`` (the cache's in an outage)."""
        cached = self.cache.version(schema_id, subject) if self.down() else None
        if cached is not None:
            return cached
        try:
            return version_under(self.client, schema_id, subject)
        except Exception as error:
            if not self.unreachable(error):
                raise
            version = self.cache.version(schema_id, subject)
            if version is None:
                raise self._unreachable_error(
                    error,
                    f"the version of schema id {schema_id} under {subject!r} is not in the schema cache "
                    f"{self.cache.path}",
                ) from error
            return version
