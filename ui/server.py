"""``agentlog ui``'s HTTP server: the standard library's threading server, GET and HEAD only.

Read-only by construction: the only methods served are GET and HEAD, every page is a read
through ``analytics.store.connect`` (queries run with ``readonly = 2``), and nothing here imports
the runtime's client or worker (an import-linter contract holds it).

Where the store is reached. Each request opens the store the way ``agentlog audit`` does: a
ClickHouse server directly; an embedded chDB store through the running sink's query port, or,
when no sink holds it, opened in this process for that request and released after it -- so the
UI never keeps the store from a sink that starts later, and never opens it while a sink holds
it. Requests to an embedded store are served one at a time (chDB allows one opener per process).

Exposure. By default the server binds 127.0.0.1 and accepts only requests whose Host header names
the loopback (a web page elsewhere cannot reach it through DNS rebinding). ``--host`` exposes it
and then a token is required: ``Authorization: Bearer <token>``, or ``?token=<token>`` once (it
sets an HttpOnly cookie and redirects to the same page without the token).
"""

from __future__ import annotations

import contextlib
import http.cookies
import importlib.resources
import json
import logging
import mimetypes
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from analytics import unseal
from analytics.audit import AuditError
from analytics.errors import StoreError
from analytics.store import QueryStore, connect, parse_dsn
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for

from . import live, pages

log = logging.getLogger("agentlog.ui")

COOKIE = "agentlog_ui_token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class UiConfigError(AgentlogError):
    """An exposure the UI refuses (an address other than the loopback without a token)."""


class UiServer:
    """The web UI over one store; ``start()`` serves on a thread, ``serve_forever()`` in the caller's."""

    def __init__(
        self,
        settings: Settings,
        dsn: str,
        host: str = "127.0.0.1",
        port: int = 8787,
        token: str | None = None,
    ) -> None:
        self.settings = settings
        self.dsn = dsn
        self.token = token
        self.loopback_only = host in LOOPBACK_HOSTS
        if not self.loopback_only and not token:
            raise UiConfigError(f"--host {host}: exposing the UI beyond the loopback needs a token")
        self._embedded = parse_dsn(dsn).embedded
        self._store_lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        # Opens sealed contents for every request; its keys reader lives as long as the server.
        self._opener = unseal.Opener.of(settings)
        self._stopping = threading.Event()  # ends the live streams (ui.live) still open

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="agentlog-ui", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._opener.close()

    @contextlib.contextmanager
    def store(self) -> Iterator[QueryStore]:
        # Embedded: one opener per process, so one request at a time reaches it (see the docstring).
        guard = self._store_lock if self._embedded else contextlib.nullcontext()
        with guard, connect(self.dsn, wait=15.0) as store:
            yield unseal.opened(store, self._opener)  # sealed contents shown open, or `erased`

    # -- routing ------------------------------------------------------------------------------------
    def route(self, path: str, query: Mapping[str, str]) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET."""
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        page: Callable[[QueryStore], str | dict[str, Any]]
        if path == "/":
            page = lambda store: pages.runs_page(store, self.settings, query)  # noqa: E731
        elif path == "/diff":
            page = lambda store: pages.diff_page(store, self.settings, query)  # noqa: E731
        elif path.startswith("/whatif/"):  # a what-if's runs beside their originals (agentlog whatif)
            whatif_id = unquote(path[len("/whatif/") :])
            page = lambda store: pages.whatif_page(store, whatif_id)  # noqa: E731
        elif path.startswith("/run/"):
            rest = path[len("/run/") :]
            if rest.endswith("/version"):
                run_id = unquote(rest[: -len("/version")])
                page = lambda store: pages.run_version(store, run_id)  # noqa: E731
            elif rest.endswith("/calls"):
                run_id = unquote(rest[: -len("/calls")])
                page = lambda store: pages.run_calls(store, self.settings, run_id, query)  # noqa: E731
            elif rest.endswith("/main"):
                run_id = unquote(rest[: -len("/main")])
                page = lambda store: pages.run_main(store, self.settings, run_id)  # noqa: E731
            else:
                run_id = unquote(rest)
                page = lambda store: pages.run_page(store, self.settings, run_id)  # noqa: E731
        else:
            return 404, "text/html; charset=utf-8", pages.error_page(404, f"no page {path}").encode()
        try:
            with self.store() as store:
                body = page(store)
        except pages.NotFound as exc:
            return 404, "text/html; charset=utf-8", pages.error_page(404, str(exc)).encode()
        except AuditError as exc:
            return 400, "text/html; charset=utf-8", pages.error_page(400, str(exc)).encode()
        except StoreError as exc:
            return 503, "text/html; charset=utf-8", pages.error_page(503, str(exc)).encode()
        if isinstance(body, dict):
            return 200, "application/json", json.dumps(body).encode()
        return 200, "text/html; charset=utf-8", body.encode()

    def _static(self, name: str) -> tuple[int, str, bytes]:
        if "/" in name or name.startswith("."):
            return 404, "text/plain", b"not found"
        resource = importlib.resources.files("ui").joinpath("static", name)
        if not resource.is_file():
            return 404, "text/plain", b"not found"
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return 200, kind, resource.read_bytes()

    # -- access -------------------------------------------------------------------------------------
    def host_allowed(self, host_header: str | None) -> bool:
        """Bound to the loopback, answer only requests addressed to it (no DNS rebinding)."""
        if not self.loopback_only:
            return True
        try:
            host = urlsplit(f"//{host_header or ''}").hostname
        except ValueError:
            return False
        return host in LOOPBACK_HOSTS

    def token_ok(self, given: str | None) -> bool:
        return self.token is None or (given is not None and secrets.compare_digest(given, self.token))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "agentlog-ui"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("ui: " + format, *args)

            def _send(
                self, status: int, kind: str, body: bytes, headers: Mapping[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _token(self) -> str | None:
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Bearer "):
                    return auth[len("Bearer ") :]
                cookie = http.cookies.SimpleCookie(self.headers.get("Cookie", ""))
                return cookie[COOKIE].value if COOKIE in cookie else None

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query))
                if not server.host_allowed(self.headers.get("Host")):
                    self._send(403, "text/plain", b"this UI answers only to a loopback Host")
                    return
                if server.token is not None and "token" in query:
                    if not server.token_ok(query.pop("token")):
                        self._send(401, "text/plain", b"bad token")
                        return
                    target = quote(parts.path) + ("?" + urlencode(query) if query else "")
                    self._send(
                        303,
                        "text/plain",
                        b"",
                        {
                            "Location": target,
                            "Set-Cookie": f"{COOKIE}={server.token}; HttpOnly; SameSite=Strict; Path=/",
                        },
                    )
                    return
                if not server.token_ok(self._token()):
                    self._send(401, "text/plain", b"a token is required: open the URL agentlog ui printed")
                    return
                if parts.path.startswith("/run/") and parts.path.endswith("/stream"):
                    self._live(unquote(parts.path[len("/run/") : -len("/stream")]))
                    return
                try:
                    status, kind, body = server.route(parts.path, query)
                except Exception as exc:  # a page that failed to render: say so, keep serving
                    log.exception("ui: %s failed", parts.path)
                    status, kind = 500, "text/html; charset=utf-8"
                    body = pages.error_page(500, f"{type(exc).__name__}: {exc}").encode()
                self._send(status, kind, body)

            def do_HEAD(self) -> None:
                self.do_GET()

            def _live(self, run_id: str) -> None:
                """The run's stream as server-sent events (ui.live), until it ends or the page goes."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                if self.command == "HEAD":
                    return
                partition = partition_for(run_id, server.settings.partitions)
                chunks = live.run_stream(server.settings, partition, run_id, server._stopping.is_set)
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the page went away
                finally:
                    chunks.close()

            def _read_only(self) -> None:
                self._send(405, "text/plain", b"agentlog ui is read-only", {"Allow": "GET, HEAD"})

            def do_POST(self) -> None:
                self._read_only()

            def do_PUT(self) -> None:
                self._read_only()

            def do_PATCH(self) -> None:
                self._read_only()

            def do_DELETE(self) -> None:
                self._read_only()

        return Handler
