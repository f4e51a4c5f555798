"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1, in a process of its own, for
benchmarks whose model calls go through the official SDK (runtime.models.openai) as a user's do.

It answers every ``POST .../chat/completions`` at once, the way a provider answers a request that
decides on a tool call: the assistant message with one tool call naming the step, the finish
reason and the usage. Its own CPU is not the worker's: it runs apart, so a benchmark that counts
the worker's CPU counts the SDK's request and response handling, not the server's.

Run: ``python bench/model_server.py`` prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or [{}]
    text = str(messages[-1].get("content", ""))
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "bench"),
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_bench",
                            "type": "function",
                            "function": {"name": "record", "arguments": json.dumps({"for": text})},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a provider's endpoint: no TCP set-up per call

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        payload = json.dumps(completion(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a worker opens a connection per concurrent call (socketserver's default: 5)


def main() -> None:
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
