"""The OpenAI-compatible model client against a local HTTP server (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runtime.config import load_settings
from runtime.models.openai import ModelHTTPError, ModelRequestError, OpenAIChatModel
from runtime.workflow.app import App, RetryPolicy

pytestmark = pytest.mark.unit
received: list[dict[str, Any]] = []


class Endpoint(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        status = {"fail-429": 429, "fail-400": 400}.get(body["messages"][0]["content"], 200)
        answer = {
            "model": body["model"],
            "choices": [
                {"message": {"role": "assistant", "content": "refund 41.60"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        }
        payload = json.dumps(answer if status == 200 else {"error": "no"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_completion_is_returned_as_json_and_config_comes_from_settings(endpoint: str) -> None:
    settings = load_settings(model_base_url=endpoint, model_api_key="sk-test", model_name="local-model")
    model = OpenAIChatModel.from_settings(settings)
    result = asyncio.run(model([{"role": "user", "content": "refund?"}], temperature=0))
    assert result["content"] == "refund 41.60" and result["finish_reason"] == "stop"
    assert result["usage"] == {"prompt_tokens": 5, "completion_tokens": 3}
    assert received[-1]["path"] == "/v1/chat/completions"
    assert received[-1]["auth"] == "Bearer sk-test"
    assert received[-1]["body"] == {
        "model": "local-model",
        "messages": [{"role": "user", "content": "refund?"}],
        "temperature": 0,
    }
    json.dumps(result)


def test_rate_limits_are_retryable_and_bad_requests_are_not(endpoint: str) -> None:
    model = OpenAIChatModel(base_url=endpoint, api_key="", model="m")
    with pytest.raises(ModelHTTPError, match="429"):
        asyncio.run(model([{"role": "user", "content": "fail-429"}]))
    with pytest.raises(ModelRequestError, match="400"):
        asyncio.run(model([{"role": "user", "content": "fail-400"}]))


def test_registers_as_an_async_model() -> None:
    app = App("t")
    app.model("planner", retry=RetryPolicy(attempts=2, non_retryable=(ModelRequestError,)))(
        OpenAIChatModel(base_url="http://127.0.0.1:1", api_key="", model="m")
    )
    assert app.models["planner"].is_async
