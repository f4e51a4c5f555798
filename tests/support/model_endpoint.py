"""An OpenAI- and Anthropic-compatible HTTP server of the tests' own, on 127.0.0.1 (no network).

It answers ``POST .../chat/completions`` (OpenAI) and ``POST .../v1/messages`` (Anthropic) the way
the providers do, with usage. The last user message steers it: ``fail-<status>`` answers with that
status, ``slow`` waits two seconds (past a short client timeout), ``rate-limit-<seconds>`` answers
the first request of a conversation (its messages) with a 429 whose body asks, as OpenAI's does,
"Please try again in <seconds>s." (and normally after), ``rate-limit-header-<seconds>`` the same
with a ``Retry-After: <seconds>`` header and a body naming no wait. Every request is kept in
``requests``, with its arrival time (``at``, ``time.time()``) and the status answered, so a test
can count what reached the endpoint, and when.

A request with ``"stream": true`` gets the same answer as server-sent events, as the providers
send them (``runtime.models`` reads them back): OpenAI's ``chat.completion.chunk``s ending with
``data: [DONE]`` (usage in a last chunk of its own when ``stream_options.include_usage`` asks),
Anthropic's ``message_start`` ... ``message_stop``. ``Endpoint.pause_s`` waits between two events;
the body is chunked (``Transfer-Encoding: chunked``, as providers send it). A last user message
``cut-<n>`` (the answer is the responder's all the same) sends ``n`` events, then closes the
connection midway through the body; ``end-<n>`` ends the body properly after ``n`` events (a
stream that stops short of its answer). A streamed request notes how many events were ``sent`` so far
(and, once all were, their number: ``events``).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support.model_stream import anthropic_events, chat_chunks

Responder = Callable[[dict[str, Any]], dict[str, Any]]


def _last_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [part.get("text", "") for part in content if isinstance(part, dict)]
            return "".join(texts)
    return ""


def chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "refund 41.60"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def anthropic_message(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [
            {"type": "text", "text": "refund 41.60"},
            {"type": "tool_use", "id": "toolu_1", "name": "refund", "input": {"order": "A-1"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 4, "cache_read_input_tokens": 2},
    }


@dataclass
class Endpoint:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    rate_limited: set[str] = field(default_factory=set)  # conversations answered 429 once
    pause_s: float = 0.0  # between two events of a streamed answer

    def first_time(self, body: dict[str, Any]) -> bool:
        """True once per conversation (the request's messages)."""
        conversation = json.dumps(body.get("messages"), sort_keys=True)
        if conversation in self.rate_limited:
            return False
        self.rate_limited.add(conversation)
        return True


def _rate_limit(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of a 429 steered by ``text`` (``rate-limit-[header-]<seconds>``)."""
    if text.startswith("rate-limit-header-"):
        seconds = text.removeprefix("rate-limit-header-")
        return {"error": {"type": "requests", "message": "Rate limit reached."}}, {"Retry-After": seconds}
    seconds = text.removeprefix("rate-limit-")
    message = (
        "Rate limit reached for gpt-test in organization org-test on tokens per min (TPM): "
        f"Limit 30000, Used 30000, Requested 120. Please try again in {seconds}s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more."
    )
    return {"error": {"type": "tokens", "code": "rate_limit_exceeded", "message": message}}, {}


@contextmanager
def model_endpoint(
    chat: Responder = chat_completion, messages: Responder = anthropic_message
) -> Iterator[Endpoint]:
    """Serve on a free port of 127.0.0.1; ``url`` is the server's root (add ``/v1`` for OpenAI)."""
    endpoint = Endpoint(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = {
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "x-api-key": self.headers.get("x-api-key"),
                "body": body,
                "at": time.time(),
            }
            endpoint.requests.append(request)
            text = _last_text(body)
            if text == "slow":
                time.sleep(2)
            status = int(text.removeprefix("fail-")) if text.startswith("fail-") else 200
            headers: dict[str, str] = {}
            if text.startswith("rate-limit-") and endpoint.first_time(body):
                status = 429
                answer, headers = _rate_limit(text)
            elif status != 200:
                answer = {"error": {"type": "test", "message": f"refused with {status}"}}
            elif self.path.endswith("/chat/completions"):
                answer = chat(body)
            else:
                answer = messages(body)
            if status == 200 and body.get("stream"):
                request["status"] = status
                short = re.fullmatch(r"(cut|end)-(\d+)", text)
                self.stream(request, answer, (short[1], int(short[2])) if short else None)
                return
            payload = json.dumps(answer).encode()
            try:
                request["status"] = status
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up (its timeout): nothing left to answer

        def stream(
            self, request: dict[str, Any], answer: dict[str, Any], short: tuple[str, int] | None
        ) -> None:
            """The answer as server-sent events in a chunked body (the connection closes after it)."""
            if self.path.endswith("/chat/completions"):
                usage = bool((request["body"].get("stream_options") or {}).get("include_usage"))
                events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chat_chunks(answer, usage)]
                events.append("data: [DONE]\n\n")
            else:
                events = [
                    f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in anthropic_events(answer)
                ]
            how, after = short or ("", len(events))
            try:
                self.protocol_version = "HTTP/1.1"  # for a chunked body
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                for n, event in enumerate(events[:after]):
                    if n and endpoint.pause_s:
                        time.sleep(endpoint.pause_s)
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    request["sent"] = n + 1
                if how == "cut":
                    self.connection.shutdown(socket.SHUT_RDWR)  # midway: the body never ends
                    return
                self.wfile.write(b"0\r\n\r\n")
                request["events"] = len(events)
            except (BrokenPipeError, ConnectionResetError):
                return

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
