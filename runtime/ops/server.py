"""The operations port of a long-running process (``agentlog worker``, ``agentlog sink``).

One HTTP port (``--metrics-port``, setting ``metrics_port``) answers three paths:

- ``/metrics``: the process's Prometheus registry (text format, or OpenMetrics when asked for);
- ``/healthz``: 200 while the process serves at all (liveness: a supervisor restarts it otherwise);
- ``/readyz``: 200 once the process does its job, 503 with the reason while it does not (a worker
  before its partitions are claimed and rebuilt, a fenced or stopping one; a sink before its store
  is open). The reason is the body, so ``curl`` says why.

The server runs in its own daemon threads (the standard library's WSGI server, threaded as
prometheus-client's own ``start_wsgi_server``): a scrape never waits on the worker's event loop,
and the collectors read the worker's state without its help (each read is a copy under the GIL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# The reason the process is not ready, or None when it is.
Readiness = Callable[[], str | None]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not worth a line of the process's output."""


class OpsServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one)."""

    def __init__(
        self, registry: CollectorRegistry, readiness: Readiness, port: int, host: str = "127.0.0.1"
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self._metrics = make_wsgi_app(registry)
        self._server = make_server(host, port, self._app, ThreadingWSGIServer, handler_class=_QuietHandler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> OpsServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="agentlog-ops", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            reason = self.readiness()
            if reason is None:
                return _text(start_response, "200 OK", "ready\n")
            return _text(start_response, "503 Service Unavailable", f"not ready: {reason}\n")
        if path in ("/metrics", "/"):
            body: Iterable[bytes] = self._metrics(environ, start_response)
            return body
        return _text(start_response, "404 Not Found", f"no such path {path!r}: /metrics, /healthz, /readyz\n")


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]
