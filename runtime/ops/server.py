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

Out of descriptors or memory, ``accept`` fails at once and the listening socket stays readable:
the standard server would retry it in a loop at 100 % CPU and answer nothing. This one backs off
(50 ms, doubling to 1 s; it answers again as soon as an accept succeeds) and tells its owner once
per outage (``on_exhausted``: a worker stops on it). Out of threads, it answers a probe in the
accepting thread itself.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# The reason the process is not ready, or None when it is.
Readiness = Callable[[], str | None]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


# accept() failing with one of these fails again at once until the process gets the resource back.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


class _GuardedServer(ThreadingWSGIServer):
    """The threaded WSGI server, with a failing accept backed off and a probe answered without a
    thread when none can be started."""

    block_on_close = False  # daemon threads; nothing to join (a thread that never started least of all)
    on_exhausted: Callable[[OSError], None] | None = None
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    failing = 0  # accepts failed in a row for want of a resource

    def get_request(self) -> tuple[Any, Any]:
        try:
            request = super().get_request()
        except OSError as error:
            if error.errno in _EXHAUSTED:
                self._back_off(error)
            raise  # socketserver drops the attempt; the connection waits in the backlog
        self.failing = 0
        return request

    def _back_off(self, error: OSError) -> None:
        self.failing += 1
        if self.failing == 1 and self.on_exhausted is not None:
            self.on_exhausted(error)
        self.sleep(min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self.failing - 1)))

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # "can't start new thread": a probe is quick, answer it here
            self.process_request_thread(request, client_address)


class _QuietHandler(WSGIRequestHandler):
    # A client that connects and sends nothing holds its handler (a thread, or the accepting thread
    # itself when none can be started) no longer than this; stop() waits for that handler at most.
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not worth a line of the process's output."""


class OpsServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: Readiness,
        port: int,
        host: str = "127.0.0.1",
        on_exhausted: Callable[[OSError], None] | None = None,
    ) -> None:
        """``on_exhausted``: called (in the server's thread) once per outage of accepts failing for
        want of descriptors or memory."""
        self.registry = registry
        self.readiness = readiness
        self._metrics = make_wsgi_app(registry)
        self._server = make_server(host, port, self._app, _GuardedServer, handler_class=_QuietHandler)
        self._server.on_exhausted = on_exhausted
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
