"""The one way to the schema registry (the Confluent REST API): every client and every request
the runtime, the CLI and the sink make to it starts here.

Two paths, each for a reason:

- confluent-kafka's ``SchemaRegistryClient`` (:func:`registry_client`) for registering, checking
  compatibility, and reading schemas by id -- the serializers use it too. Importing it loads
  authlib's OAuth stack, httpx and joserfc (a large share of a cold worker's recovery), so it is imported when a client is first built, never at module import.
- Plain HTTP over the standard library (:func:`lookup_ids`, :func:`compatibility_messages`) for
  what must not pay that import or what the client does not expose. A recovering worker must
  know the registry id of every schema it writes before its first record, and that is one
  documented call per subject (``POST /subjects/{subject}``, "check if a schema has already
  been registered under the subject"), asked over one kept-alive connection. The registry's
  verbose compatibility explanation (``?verbose=true``) is not in the client's API.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from runtime.config import Settings
from runtime.errors import AgentlogError, RetryableError

if TYPE_CHECKING:
    from runtime.log.schemas.registry_client import Schema, SchemaRegistryClient, SchemaRegistryError

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Error codes of the Confluent API for "no such subject / version / schema".
_NOT_FOUND_CODES = (40401, 40402, 40403, 40408)


class LookupUnavailable(AgentlogError):
    """The registry could not be asked over plain HTTP (not a "not registered" answer); the
    caller falls back to the client."""


class RegistryUnreachable(LookupUnavailable, RetryableError):
    """The registry did not answer (refused, timed out, a server error), and what was needed is not
    in the schema cache (runtime.log.schemas.cache). Retryable: a worker stops before the command it
    was handling is committed; a client call fails with this message instead of a traceback."""

    def __init__(self, url: str, detail: str, what: str = "") -> None:
        super().__init__(f"schema registry at {url} unreachable ({detail})" + (f": {what}" if what else ""))
        self.url = url


def is_unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the registry could not be asked (as opposed to an answer): a
    connection or timeout error of either path, or a 5xx answer (the registry's own store down)."""
    if isinstance(error, (OSError, RegistryUnreachable)):
        return True
    # The client's transport errors (httpx, or the httpx2 fork newer confluent-kafka releases use),
    # recognised by name: importing either just to ask would cost a cold process its import.
    if any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(error).__mro__
    ):
        return True
    status = getattr(error, "http_status_code", None)
    return isinstance(status, int) and status >= 500


# -- the confluent client ------------------------------------------------------------------------
def registry_client(settings: Settings) -> SchemaRegistryClient:
    """A registry client for the deployment (imports the client on first call: a heavy import)."""
    from runtime.log.schemas.registry_client import SchemaRegistryClient

    return SchemaRegistryClient({"url": settings.schema_registry_url})


def is_not_found(error: SchemaRegistryError) -> bool:
    """Whether the registry's error means "no such subject, version or schema"."""
    return error.http_status_code == 404 or error.error_code in _NOT_FOUND_CODES


def schema_by_id(client: SchemaRegistryClient, schema_id: int) -> Schema | None:
    """The schema registered under ``schema_id`` (cached by the client), or None if the registry
    has no such id. Raises SchemaRegistryError for any other answer."""
    from runtime.log.schemas.registry_client import SchemaRegistryError

    try:
        return client.get_schema(schema_id)
    except SchemaRegistryError as error:
        if is_not_found(error):
            return None
        raise


def schema_ids(settings: Settings, subjects: Iterable[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """``{subject: (id, version)}`` for each ``(subject, Avro schema text)`` registered exactly so;
    others are left out. Plain HTTP (:func:`lookup_registered`), so a cold worker does not import
    the client; where that cannot ask, a throwaway client does. Either connection is closed before
    this returns (a supervisor resolves ids before forking workers, and no child may inherit an
    open connection)."""
    wanted = list(subjects)
    try:
        return lookup_registered(settings.schema_registry_url, wanted)
    except RegistryUnreachable:
        raise  # the client would meet the same closed port
    except LookupUnavailable:
        pass  # the client below asks the same question its own way
    from runtime.log.schemas.registry_client import Schema, SchemaRegistryError

    found: dict[str, tuple[int, int]] = {}
    with registry_client(settings) as scout:
        for subject, text in wanted:
            try:
                registered = scout.lookup_schema(subject, Schema(text, schema_type="AVRO"))
            except SchemaRegistryError:
                continue
            if registered.schema_id is not None:
                found[subject] = (registered.schema_id, int(registered.version or 0))
    return found


def version_under(client: SchemaRegistryClient, schema_id: int, subject: str) -> int:
    """The registry's version number of schema ``schema_id`` under ``subject`` (versions are per
    subject, ids are global); 0 if the schema is not registered under that subject."""
    for registered in client.get_schema_versions(schema_id) or []:
        if registered.subject == subject and registered.version is not None:
            return int(registered.version)
    return 0


# -- plain HTTP ----------------------------------------------------------------------------------
@contextmanager
def _connection(url: str, timeout: float) -> Iterator[tuple[http.client.HTTPConnection, str, dict[str, str]]]:
    """One kept-alive connection to the registry at ``url``: (connection, base path, headers)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LookupUnavailable(f"{url!r}: not an http(s) URL, left to the client")
    headers = {"Content-Type": _CONTENT_TYPE, "Connection": "keep-alive"}
    if parts.username is not None:  # as the client does: basic auth from the URL's user info
        user_info = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode("ascii")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(netloc, timeout=timeout)
    try:
        yield connection, parts.path.rstrip("/"), headers
    finally:
        connection.close()


def _post(
    connection: http.client.HTTPConnection, path: str, headers: dict[str, str], body: dict[str, Any]
) -> tuple[int, bytes]:
    connection.request("POST", path, json.dumps(body), headers)
    response = connection.getresponse()
    return response.status, response.read()


def lookup_ids(url: str, subjects: Iterable[tuple[str, str]], timeout: float = 10.0) -> dict[str, int]:
    """``{subject: id}`` for each ``(subject, Avro schema text)`` registered exactly so; subjects
    or schemas the registry does not know (404) are left out. Raises LookupUnavailable if the
    registry cannot be asked or answers anything else."""
    return {subject: found[0] for subject, found in lookup_registered(url, subjects, timeout).items()}


# Lookups asked at once, each over a connection of its own: one at a time, the 27 lookups of a
# worker's warm-up took ~75 ms on a local registry -- most of a restarted worker's wait before its
# first claim could be written.
LOOKUP_CONNECTIONS = 4


def lookup_registered(
    url: str, subjects: Iterable[tuple[str, str]], timeout: float = 10.0
) -> dict[str, tuple[int, int]]:
    """``{subject: (id, version)}``, as :func:`lookup_ids` (the registry answers both at once)."""
    wanted = list(subjects)
    shares = [wanted[i::LOOKUP_CONNECTIONS] for i in range(min(LOOKUP_CONNECTIONS, len(wanted)))]
    if len(shares) <= 1:
        return _lookup_share(url, wanted, timeout)
    with ThreadPoolExecutor(len(shares), thread_name_prefix="agentlog-registry-lookup") as pool:
        answers = list(pool.map(lambda share: _lookup_share(url, share, timeout), shares))
    return {subject: found for answer in answers for subject, found in answer.items()}


def _lookup_share(url: str, subjects: list[tuple[str, str]], timeout: float) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    try:
        with _connection(url, timeout) as (connection, base, headers):
            for subject, text in subjects:
                path = f"{base}/subjects/{quote(subject, safe='')}"
                status, payload = _post(connection, path, headers, {"schema": text, "schemaType": "AVRO"})
                if status == 404:
                    continue
                if status >= 500:
                    raise RegistryUnreachable(url, f"it answered {status}: {payload[:200]!r}")
                if status != 200:
                    raise LookupUnavailable(f"registry answered {status} for {subject}: {payload[:200]!r}")
                answer = json.loads(payload)
                found[subject] = (int(answer["id"]), int(answer["version"]))
    except OSError as error:
        raise RegistryUnreachable(url, f"{type(error).__name__}: {error}") from error
    except (http.client.HTTPException, ValueError, KeyError) as error:
        raise LookupUnavailable(f"registry lookup failed: {error}") from error
    return found


def compatibility_messages(url: str, subject: str, text: str, timeout: float = 10.0) -> list[str]:
    """The registry's own explanation of why ``text`` is incompatible with ``subject``'s versions
    (``verbose=true``); empty when it gives none or cannot be asked -- it is detail for a person,
    the verdict comes from the client."""
    path = f"/compatibility/subjects/{quote(subject, safe='')}/versions?verbose=true"
    try:
        with _connection(url, timeout) as (connection, base, headers):
            _, payload = _post(connection, base + path, headers, {"schema": text, "schemaType": "AVRO"})
        body = json.loads(payload)
    except (LookupUnavailable, OSError, http.client.HTTPException, ValueError):
        return []
    messages = body.get("messages") if isinstance(body, dict) else None
    return [str(m) for m in messages] if isinstance(messages, list) else []
