"""Fakes of the tests' own that enforce limits as real services do, on 127.0.0.1 (no network).

``limited_provider``: an OpenAI-compatible ``POST /v1/chat/completions`` that allows
``requests_per_minute`` and ``tokens_per_minute`` over sliding 60 s windows and answers 429 with
``Retry-After`` past either. It charges a request ``ceil(len(canonical prompt) / 4) + max_tokens``
tokens -- what runtime.workflow.tokens estimates, so the estimate and the reported usage agree --
and records each request's arrival time, tokens, sender (the ``x-worker`` header) and answer.

``payments_service``: ``POST /pay`` that counts the calls in flight and refuses (409) any that
would make more than ``allowed`` at once; each call takes ``seconds``.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runtime.workflow.canonical import canonical_json

WINDOW_S = 60.0


@dataclass(frozen=True)
class Arrival:
    at: float  # time.time() when the request arrived
    tokens: int
    worker: str
    status: int  # 200, or 429 past a limit
    tenant: str = ""


@dataclass
class LimitedProvider:
    url: str
    requests_per_minute: int
    tokens_per_minute: int
    latency_s: float
    arrivals: list[Arrival] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)  # worker -> requests admitted, not answered yet
    _accepted: deque[tuple[float, int]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, tokens: int, worker: str, tenant: str) -> tuple[int, float]:
        """Record the arrival; (200, 0) if it fits both windows, else (429, seconds to wait)."""
        with self._lock:
            now = time.time()
            while self._accepted and self._accepted[0][0] <= now - WINDOW_S:
                self._accepted.popleft()
            used = sum(t for _, t in self._accepted)
            if len(self._accepted) + 1 > self.requests_per_minute or used + tokens > self.tokens_per_minute:
                retry = max(0.0, self._accepted[0][0] + WINDOW_S - now) if self._accepted else 1.0
                self.arrivals.append(Arrival(now, tokens, worker, 429, tenant))
                return 429, retry
            self._accepted.append((now, tokens))
            self.arrivals.append(Arrival(now, tokens, worker, 200, tenant))
            self.in_flight[worker] = self.in_flight.get(worker, 0) + 1
            return 200, 0.0

    def answered(self, worker: str) -> None:
        with self._lock:
            self.in_flight[worker] -= 1

    def busy(self) -> str | None:
        """A worker with a request in flight (holding the permits it was granted), if any."""
        with self._lock:
            return next((worker for worker, n in self.in_flight.items() if n > 0), None)

    def most_in_window(self, status: int | None = None) -> tuple[int, int]:
        """The most requests, and the most tokens, any 60 s window saw (of ``status``, or all)."""
        with self._lock:
            seen = sorted(
                (a for a in self.arrivals if status is None or a.status == status), key=lambda a: a.at
            )
        most_requests = most_tokens = 0
        start = 0
        tokens = 0
        for end, arrival in enumerate(seen):
            tokens += arrival.tokens
            while arrival.at - seen[start].at >= WINDOW_S:
                tokens -= seen[start].tokens
                start += 1
            most_requests = max(most_requests, end - start + 1)
            most_tokens = max(most_tokens, tokens)
        return most_requests, most_tokens


def prompt_tokens(body: dict[str, Any]) -> int:
    return -(-len(canonical_json(body.get("messages") or [])) // 4)


@contextmanager
def limited_provider(
    requests_per_minute: int, tokens_per_minute: int, latency_s: float = 0.0
) -> Iterator[LimitedProvider]:
    """Serve on a free port; ``url`` is the server's root (the OpenAI base URL is ``url + '/v1'``)."""
    provider = LimitedProvider("", requests_per_minute, tokens_per_minute, latency_s)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            completion = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            prompt = prompt_tokens(body)
            status, retry = provider.admit(
                prompt + completion, self.headers.get("x-worker", ""), self.headers.get("x-tenant", "")
            )
            if status == 429:
                self._answer(
                    429,
                    {
                        "error": {
                            "message": "Rate limit reached",
                            "type": "requests",
                            "code": "rate_limit_exceeded",
                        }
                    },
                    {"retry-after": str(math.ceil(retry))},
                )
                return
            if provider.latency_s:
                time.sleep(provider.latency_s)
            provider.answered(self.headers.get("x-worker", ""))
            self._answer(
                200,
                {
                    "id": "chatcmpl-limited",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "?"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                    },
                },
            )

        def _answer(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            _answer(self, status, payload, headers)

        def log_message(self, format: str, *args: Any) -> None:
            return

    with _serving(Handler) as url:
        provider.url = url
        yield provider


@dataclass
class PaymentsService:
    url: str
    allowed: int
    seconds: float
    in_flight: int = 0
    most_in_flight: int = 0
    completed: int = 0
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def payments_service(allowed: int = 5, seconds: float = 0.2) -> Iterator[PaymentsService]:
    """A payment API allowing ``allowed`` calls in flight at once; ``url`` is its root."""
    service = PaymentsService("", allowed, seconds)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            with service.lock:
                if service.in_flight >= service.allowed:
                    service.refused += 1
                    status = 409
                else:
                    service.in_flight += 1
                    service.most_in_flight = max(service.most_in_flight, service.in_flight)
                    status = 200
            if status == 200:
                time.sleep(service.seconds)
                with service.lock:
                    service.in_flight -= 1
                    service.completed += 1
            _answer(self, status, {"ok": status == 200})

        def log_message(self, format: str, *args: Any) -> None:
            return

    with _serving(Handler) as url:
        service.url = url
        yield service


def _answer(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a worker killed mid-call
        handler.wfile.write(data)


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="limited-fake", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
