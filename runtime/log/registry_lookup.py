"""Schema ids for a worker's start-up, asked over plain HTTP.

A recovering worker must know the registry id of every schema it writes before its first
record. confluent-kafka's registry client answers that, but importing it loads authlib's OAuth
stack, httpx and joserfc: ~250 ms of a cold worker's ~1 s recovery on a 2-vCPU machine, spent
before the first step can run. The lookup itself is one documented REST call per subject
(``POST /subjects/{subject}``, "check if a schema has already been registered under the
subject"), so start-up asks it directly, over one kept-alive connection. Everything else --
registering, compatibility, reading schemas by id -- stays with the client, imported when
first needed.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable
from urllib.parse import quote, urlsplit

_HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json", "Connection": "keep-alive"}


class LookupUnavailable(Exception):
    """The registry could not be asked (not a "not registered" answer); the caller falls back."""


def lookup_ids(url: str, subjects: Iterable[tuple[str, str]], timeout: float = 10.0) -> dict[str, int]:
    """``{subject: id}`` for each ``(subject, schema text)`` registered exactly so; subjects or
    schemas the registry does not know (404) are left out."""
    parts = urlsplit(url)
    if parts.username or parts.password or parts.scheme not in ("http", "https"):
        raise LookupUnavailable(f"{parts.scheme}:// or credentials in the URL: left to the client")
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.netloc, timeout=timeout)
    base = parts.path.rstrip("/")
    found: dict[str, int] = {}
    try:
        for subject, text in subjects:
            body = json.dumps({"schema": text, "schemaType": "AVRO"})
            connection.request("POST", f"{base}/subjects/{quote(subject, safe='')}", body, _HEADERS)
            response = connection.getresponse()
            payload = response.read()
            if response.status == 404:
                continue
            if response.status != 200:
                raise LookupUnavailable(
                    f"registry answered {response.status} for {subject}: {payload[:200]!r}"
                )
            found[subject] = int(json.loads(payload)["id"])
    except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
        raise LookupUnavailable(f"registry lookup failed: {error}") from error
    finally:
        connection.close()
    return found
