"""The model clients over the official openai and anthropic SDKs, against a local HTTP server
(127.0.0.1 only): what they return, how their errors map to agentlog's retryable / terminal
errors, and the usage that reaches the call record."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.config import load_settings
from runtime.errors import RetryableError, TerminalError
from runtime.log.records.events import ModelCallCompleted, ModelCallFailed
from runtime.models.anthropic import AnthropicModel
from runtime.models.errors import ModelRateLimited
from runtime.models.openai import ModelHTTPError, ModelRequestError, ModelUnreachable, OpenAIChatModel
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness
from support.model_endpoint import Endpoint, model_endpoint

pytestmark = pytest.mark.unit


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with model_endpoint() as served:
        yield served


def _ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "you refund"}, {"role": "user", "content": text}]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_openai_completion_is_returned_as_json_and_config_comes_from_settings(endpoint: Endpoint) -> None:
    settings = load_settings(
        model_base_url=f"{endpoint.url}/v1", model_api_key="sk-test", model_name="local-model"
    )
    model = OpenAIChatModel.from_settings(settings)
    result = asyncio.run(model([{"role": "user", "content": "refund?"}], temperature=0))
    assert result["content"] == "refund 41.60" and result["finish_reason"] == "stop"
    assert result["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert result["model"] == "local-model" and result["tool_calls"] == []
    sent = endpoint.requests[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "local-model",
        "messages": [{"role": "user", "content": "refund?"}],
        "temperature": 0,
    }
    json.dumps(result)


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, ModelHTTPError), (500, ModelHTTPError), (503, ModelHTTPError)]
    + [(s, ModelRequestError) for s in (400, 401, 403, 404, 422)],
)
def test_openai_status_errors_map_to_retryable_or_terminal(
    endpoint: Endpoint, status: int, error: type[Exception]
) -> None:
    model = OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="m")
    with pytest.raises(error, match=str(status)):
        asyncio.run(model(_ask(f"fail-{status}")))
    assert issubclass(error, RetryableError if status in (429, 500, 503) else TerminalError)
    assert len(endpoint.requests) == 1  # the SDK's own retries are off: each attempt is agentlog's


def test_openai_timeouts_and_refused_connections_are_retryable(endpoint: Endpoint) -> None:
    slow = OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="m", timeout_s=0.3)
    with pytest.raises(ModelUnreachable, match="APITimeoutError"):
        asyncio.run(slow(_ask("slow")))
    gone = OpenAIChatModel(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="", model="m")
    with pytest.raises(ModelUnreachable, match="APIConnectionError"):
        asyncio.run(gone(_ask("hello")))


def test_anthropic_message_is_returned_as_json_with_system_and_tool_use(endpoint: Endpoint) -> None:
    settings = load_settings(model_base_url=endpoint.url, model_api_key="sk-ant", model_name="claude-test")
    model = AnthropicModel.from_settings(settings)
    result = asyncio.run(model(_ask("refund?")))
    assert result == {
        "content": "refund 41.60",
        "tool_calls": [{"id": "toolu_1", "name": "refund", "input": {"order": "A-1"}}],
        "finish_reason": "tool_use",
        "model": "claude-test",
        "usage": {"input_tokens": 7, "output_tokens": 4, "cache_read_input_tokens": 2},
    }
    sent = endpoint.requests[-1]
    assert sent["path"] == "/v1/messages"
    assert "sk-ant" in (sent["x-api-key"], (sent["auth"] or "").removeprefix("Bearer "))
    assert sent["body"]["system"] == "you refund"
    assert sent["body"]["messages"] == [{"role": "user", "content": "refund?"}]
    assert sent["body"]["max_tokens"] == 1024


def test_anthropic_base_url_defaults_to_the_sdk_endpoint_when_settings_leave_it() -> None:
    assert AnthropicModel.from_settings(load_settings(model_api_key="k")).base_url is None


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, ModelHTTPError), (529, ModelHTTPError), (500, ModelHTTPError)]
    + [(s, ModelRequestError) for s in (400, 401, 403, 404)],
)
def test_anthropic_status_errors_map_to_retryable_or_terminal(
    endpoint: Endpoint, status: int, error: type[Exception]
) -> None:
    model = AnthropicModel(base_url=endpoint.url, api_key="k", model="m")
    with pytest.raises(error, match=str(status)):
        asyncio.run(model(_ask(f"fail-{status}")))
    assert len(endpoint.requests) == 1


def test_anthropic_timeouts_and_refused_connections_are_retryable(endpoint: Endpoint) -> None:
    slow = AnthropicModel(base_url=endpoint.url, api_key="k", model="m", timeout_s=0.3)
    with pytest.raises(ModelUnreachable, match="APITimeoutError"):
        asyncio.run(slow(_ask("slow")))
    gone = AnthropicModel(base_url=f"http://127.0.0.1:{_closed_port()}", api_key="k", model="m")
    with pytest.raises(ModelUnreachable, match="APIConnectionError"):
        asyncio.run(gone(_ask("hello")))


def _app(endpoint: Endpoint) -> App:
    app = App("sdk-models")
    retry = RetryPolicy(attempts=3, initial_backoff=0.01)
    app.model("gpt", retry=retry)(OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="gpt-x"))
    app.model("claude", retry=retry)(AnthropicModel(base_url=endpoint.url, api_key="k", model="claude-x"))

    @app.workflow("ask")
    async def ask(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.model(request["model"], messages=_ask(request["text"]))

    return app


@pytest.mark.parametrize(
    ("model", "tokens"), [("gpt", (5, 3, None, "gpt-x")), ("claude", (7, 4, 2, "claude-x"))]
)
def test_usage_reaches_the_call_record(endpoint: Endpoint, model: str, tokens: tuple[Any, ...]) -> None:
    async def scenario() -> ModelCallCompleted:
        harness = Harness(_app(endpoint))
        harness.start()
        run_id = harness.client.submit("ask", {"model": model, "text": "refund?"}).run_id
        status = await harness.ended(run_id)
        await harness.stop_all()
        assert status.status == "completed"
        return next(e for e in harness.events(run_id) if isinstance(e, ModelCallCompleted))

    done = asyncio.run(scenario())
    assert (done.input_tokens, done.output_tokens, done.cached_tokens, done.response_model) == tokens


@pytest.mark.parametrize(("text", "attempts"), [("fail-400", 1), ("fail-401", 1), ("fail-500", 3)])
def test_the_worker_retries_retryable_model_errors_only(endpoint: Endpoint, text: str, attempts: int) -> None:
    async def scenario() -> list[ModelCallFailed]:
        harness = Harness(_app(endpoint))
        harness.start()
        run_id = harness.client.submit("ask", {"model": "gpt", "text": text}).run_id
        status = await harness.ended(run_id)
        await harness.stop_all()
        assert status.status == "failed"
        return [e for e in harness.events(run_id) if isinstance(e, ModelCallFailed)]

    failures = asyncio.run(scenario())
    assert [f.attempt for f in failures] == list(range(1, attempts + 1))
    assert failures[-1].final and len(endpoint.requests) == attempts


@pytest.mark.parametrize(
    ("client", "text", "after_s"),
    [
        ("openai", "rate-limit-2.5", 2.5),  # the body's "Please try again in 2.5s."
        ("openai", "rate-limit-1m30", 90.0),  # "try again in 1m30s."
        ("openai", "rate-limit-header-7", 7.0),  # Retry-After: 7
        ("anthropic", "rate-limit-header-7", 7.0),
        ("openai", "rate-limit-header-soon", None),  # a junk header: a rate limit naming no wait
    ],
)
def test_a_rate_limit_carries_the_wait_the_provider_asks_for(
    endpoint: Endpoint, client: str, text: str, after_s: float | None
) -> None:
    model = (
        OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="m")
        if client == "openai"
        else AnthropicModel(base_url=endpoint.url, api_key="k", model="m")
    )
    with pytest.raises(ModelRateLimited) as raised:
        asyncio.run(model(_ask(text)))
    assert raised.value.after_s == after_s and str(raised.value).startswith("429 from ")
    if after_s is not None:
        assert f"(asks to wait {after_s:g} s)" in str(raised.value)
    assert len(endpoint.requests) == 1


def test_the_worker_waits_what_a_rate_limit_asks_without_spending_attempts(endpoint: Endpoint) -> None:
    """attempts=1: a rate limit is a wait, not a spent attempt; the re-send comes no earlier than
    the 0.4 s the body asked for, and the failure records when it may."""

    async def scenario() -> list[Any]:
        app = App("sdk-rate-limit")
        model = OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="gpt-x")
        app.model("gpt", retry=RetryPolicy(attempts=1))(model)

        @app.workflow("ask")
        async def ask(ctx: Context, request: dict[str, Any]) -> Any:
            return await ctx.model("gpt", messages=_ask(request["text"]))

        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit("ask", {"text": "rate-limit-0.4"}).run_id
        status = await harness.ended(run_id)
        await harness.stop_all()
        assert status.status == "completed"
        return [e for e in harness.events(run_id) if isinstance(e, (ModelCallFailed, ModelCallCompleted))]

    failure, done = asyncio.run(scenario())
    assert isinstance(failure, ModelCallFailed) and isinstance(done, ModelCallCompleted)
    assert failure.error_type == "ModelRateLimited" and not failure.final and failure.attempt == 1
    assert "(asks to wait 0.4 s)" in failure.error
    assert done.attempt == 2
    first, second = endpoint.requests
    # asked after the 429 arrived, recorded after it was asked (the same machine's clock; ms floored)
    assert first["at"] * 1000 + 400 <= failure.retry_at <= failure.occurred_at + 400 + 1
    assert first["status"] == 429 and second["status"] == 200
    assert second["at"] - first["at"] >= 0.4
