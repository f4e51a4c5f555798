"""The sink's query port: how ``agentlog audit`` reads an embedded store while the sink holds it.

The sink process is the only one allowed to open a chDB path (see ``analytics.store``), so it
answers read-only queries for everyone else: HTTP on 127.0.0.1, an ephemeral port, a random
token, both published in ``<path>.sink.json`` (mode 0600, so only the sink's user can read the
token). Requests are JSON ``{"sql": ..., "parameters": {...}}``; answers carry the same
JSON-safe ``QueryResult`` a direct query gives. Every statement passes the read-only check and
runs with ``readonly = 2`` on a client of its own, never the writer's.

One write is taken besides: ``POST /prices`` replaces the model prices (``audit prices load``).
Prices are the user's data, not the log's copy, so a running sink must not stand between a user
and a corrected price; the rows arrive already checked by the CLI and are checked again here.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from . import prices
from .errors import StoreError
from .proxy import Endpoint
from .results import QueryResult
from .sqlguard import ReadOnlyViolation, check_read_only
from .store import ClientStore

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

log = logging.getLogger("agentlog.analytics.server")

_MAX_REQUEST = 1 << 20


class QueryServer:
    """Serves read-only queries on a store this process holds; one thread per request."""

    def __init__(self, client: Client, host: str = "127.0.0.1", port: int = 0) -> None:
        self._store = ClientStore(client)
        self._lock = threading.Lock()  # one query at a time on this server's client
        self.token = secrets.token_hex(16)
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> Endpoint:
        host, port = self._httpd.server_address[:2]
        return Endpoint(str(host), int(port), self.token, os.getpid())

    def start(self) -> Endpoint:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="agentlog-query-server", daemon=True
        )
        self._thread.start()
        return self.endpoint

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, sql: str, parameters: Mapping[str, Any]) -> QueryResult:
        statement = check_read_only(sql)
        with self._lock:
            return self._store.query(statement, parameters, readonly=True)

    def load_prices(self, rows: list[Any]) -> int:
        """Replace the store's prices with ``rows`` (``prices.Price.to_json`` lists)."""
        parsed = [prices.Price.from_json(row) for row in rows]
        with self._lock:
            return prices.load_prices(self._store.client, parsed)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("query server: " + format, *args)

            def _reply(self, status: int, body: Mapping[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization", "")
                return secrets.compare_digest(given, f"Bearer {server.token}")

            def do_GET(self) -> None:
                if not self._authorized():
                    self._reply(401, {"error": "bad token"})
                elif self.path == "/health":
                    self._reply(200, {"ok": True, "pid": os.getpid()})
                else:
                    self._reply(404, {"error": "not found"})

            def do_POST(self) -> None:
                if not self._authorized():
                    self._reply(401, {"error": "bad token"})
                    return
                if self.path not in ("/query", "/prices"):
                    self._reply(404, {"error": "not found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > _MAX_REQUEST:
                    self._reply(413, {"error": "request too large"})
                    return
                try:
                    request = json.loads(self.rfile.read(length))
                    if self.path == "/prices":
                        body: dict[str, Any] = {"loaded": server.load_prices(list(request["prices"]))}
                    else:
                        sql, parameters = str(request["sql"]), dict(request.get("parameters") or {})
                        body = {"result": server.answer(sql, parameters).to_json()}
                except ReadOnlyViolation as exc:
                    self._reply(403, {"error": str(exc)})
                except (StoreError, prices.PriceFileError, ValueError, KeyError, TypeError) as exc:
                    self._reply(400, {"error": str(exc)})
                else:
                    self._reply(200, body)

        return Handler
