"""The client side of the sink's query port: where the sink advertises it (``Endpoint``, the
``<path>.sink.json`` file) and how a reader asks it (``ProxyStore``).

``analytics.store.connect`` uses it when the sink holds an embedded store; ``analytics.server``
(the sink's side) writes the Endpoint it serves on. Neither imports the other through this module.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import StoreError
from .results import JsonValue, QueryResult
from .sqlguard import ReadOnlyViolation


@dataclass(frozen=True)
class Endpoint:
    """Where the sink holding an embedded store answers queries."""

    host: str
    port: int
    token: str
    pid: int

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self), handle)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> Endpoint | None:
        try:
            data = json.loads(path.read_text())
            return cls(str(data["host"]), int(data["port"]), str(data["token"]), int(data["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


class ProxyStore:
    """The audit CLI's side: sends queries to the sink that holds the store."""

    def __init__(self, endpoint: Endpoint, timeout: float = 120.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._base = f"http://{endpoint.host}:{endpoint.port}"

    def _request(
        self, path: str, body: Mapping[str, Any] | None, timeout: float
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self._base + path,
            data=data,
            method="POST" if body is not None else "GET",
            headers={"Authorization": f"Bearer {self.endpoint.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read())
            except ValueError:
                payload = {"error": str(exc)}
            return int(exc.code), payload

    def ping(self) -> bool:
        try:
            status, body = self._request("/health", None, timeout=2.0)
        except (OSError, ValueError):
            return False
        return status == 200 and body.get("pid") == self.endpoint.pid

    def load_prices(self, rows: list[list[JsonValue]]) -> int:
        """Ask the sink to replace the store's prices; how many rows it now holds."""
        try:
            status, body = self._request("/prices", {"prices": rows}, self.timeout)
        except (OSError, ValueError) as exc:
            raise StoreError(f"the sink's query port ({self._base}) did not answer: {exc}") from exc
        if status != 200:
            raise StoreError(f"the sink refused the prices: {body.get('error')}")
        return int(body["loaded"])

    def query(
        self, sql: str, parameters: Mapping[str, Any] | None = None, *, readonly: bool = False
    ) -> QueryResult:
        try:
            status, body = self._request(
                "/query", {"sql": sql, "parameters": dict(parameters or {})}, self.timeout
            )
        except (OSError, ValueError) as exc:
            raise StoreError(f"the sink's query port ({self._base}) did not answer: {exc}") from exc
        if status == 403:
            raise ReadOnlyViolation(str(body.get("error")))
        if status != 200:
            raise StoreError(f"query failed: {body.get('error')}")
        return QueryResult.from_json(body["result"])
