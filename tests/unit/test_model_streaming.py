"""The openai and anthropic adapters stream when someone reads the call's deltas (a sink is set,
``runtime.models.deltas``), against the tests' own streaming endpoint (127.0.0.1): the deltas
arrive in order, the result is the unstreamed call's to the byte, usage comes from the stream's
end, a stream cut midway is a retryable error, and with no sink nothing is streamed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.config import Settings
from runtime.errors import RetryableError
from runtime.log.records.events import ModelCallCompleted
from runtime.models.anthropic import AnthropicModel
from runtime.models.deltas import Delta, deltas_to
from runtime.models.errors import ModelHTTPError, ModelRequestError, ModelUnreachable
from runtime.models.openai import OpenAIChatModel
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_worker import serving
from support.model_endpoint import Endpoint, chat_completion, model_endpoint

pytestmark = pytest.mark.unit


ARGS = '{"order": "A-1", "amount": 41.6}'


def tool_completion(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion with text and two tool calls."""
    answer = chat_completion(body)
    answer["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_1", "type": "function", "function": {"name": "refund", "arguments": ARGS}},
        {"id": "call_2", "type": "function", "function": {"name": "notify", "arguments": "{}"}},
    ]
    answer["choices"][0]["finish_reason"] = "tool_calls"
    return answer


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with model_endpoint(chat=tool_completion) as served:
        yield served


def _ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "you refund"}, {"role": "user", "content": text}]


def _call(model: Any, text: str, sink: list[Delta] | None) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        if sink is None:
            return await model(_ask(text))  # type: ignore[no-any-return]
        with deltas_to(sink.append):
            return await model(_ask(text))  # type: ignore[no-any-return]

    return asyncio.run(call())


def _openai(endpoint: Endpoint) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=f"{endpoint.url}/v1", api_key="", model="gpt-x")


def _anthropic(endpoint: Endpoint) -> AnthropicModel:
    return AnthropicModel(base_url=endpoint.url, api_key="k", model="claude-x")


def test_openai_streams_deltas_in_order_and_records_the_unstreamed_result(endpoint: Endpoint) -> None:
    model = _openai(endpoint)
    unstreamed = _call(model, "refund?", None)
    deltas: list[Delta] = []
    streamed = _call(model, "refund?", deltas)
    assert json.dumps(streamed) == json.dumps(unstreamed)  # the same JSON, key order included
    assert streamed["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert [d for d in deltas if d.kind == "text"] == [Delta("text", "refund "), Delta("text", "41.60")]
    tool_deltas = [d for d in deltas if d.kind == "tool_args"]
    assert tool_deltas[0] == Delta("tool_args", "", index=0, name="refund")  # the name comes first
    assert "".join(d.text for d in tool_deltas if d.index == 0) == ARGS
    assert len([d for d in tool_deltas if d.index == 0]) > 2  # in pieces, as they formed
    assert [d.index for d in tool_deltas] == sorted(d.index for d in tool_deltas)
    assert next(d.name for d in tool_deltas if d.index == 1) == "notify"
    plain, streaming = endpoint.requests
    assert "stream" not in plain["body"]
    assert streaming["body"]["stream"] is True
    assert streaming["body"]["stream_options"] == {"include_usage": True}


def test_openai_without_usage_in_the_stream_records_none(endpoint: Endpoint) -> None:
    """A server that ignores stream_options sends no usage chunk: the call records {} as an
    unstreamed answer without usage would."""

    def no_usage(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in chat_completion(body).items() if k != "usage"}

    with model_endpoint(chat=no_usage) as bare:
        assert _call(_openai(bare), "refund?", [])["usage"] == {}


def test_anthropic_streams_deltas_in_order_and_records_the_unstreamed_result(endpoint: Endpoint) -> None:
    model = _anthropic(endpoint)
    unstreamed = _call(model, "refund?", None)
    deltas: list[Delta] = []
    streamed = _call(model, "refund?", deltas)
    assert json.dumps(streamed) == json.dumps(unstreamed)
    assert streamed["usage"] == {"input_tokens": 7, "output_tokens": 4, "cache_read_input_tokens": 2}
    assert deltas[:2] == [Delta("text", "refund "), Delta("text", "41.60")]
    tool_deltas = deltas[2:]
    assert tool_deltas[0] == Delta("tool_args", "", index=0, name="refund")
    assert all(d.kind == "tool_args" and d.index == 0 for d in tool_deltas)
    assert json.loads("".join(d.text for d in tool_deltas)) == {"order": "A-1"}
    plain, streaming = endpoint.requests
    assert "stream" not in plain["body"] and streaming["body"]["stream"] is True


@pytest.mark.parametrize("adapter", [_openai, _anthropic])
def test_with_no_sink_nothing_is_streamed_and_nothing_emitted(endpoint: Endpoint, adapter: Any) -> None:
    _call(adapter(endpoint), "refund?", None)
    assert [r["body"].get("stream", False) for r in endpoint.requests] == [False]


@pytest.mark.parametrize("adapter", [_openai, _anthropic])
@pytest.mark.parametrize(
    ("text", "error"),
    [
        # the connection lost midway through the body: the SDKs raise APIConnectionError
        ("cut-1", "APIConnectionError"),
        ("cut-3", "APIConnectionError"),
        ("end-3", "the stream ended before the answer did"),  # a body that ends short of the answer
    ],
)
def test_a_stream_cut_midway_is_a_retryable_error(
    endpoint: Endpoint, adapter: Any, text: str, error: str
) -> None:
    deltas: list[Delta] = []
    with pytest.raises(ModelUnreachable, match=error) as raised:
        _call(adapter(endpoint), text, deltas)
    assert isinstance(raised.value, RetryableError)
    assert len(endpoint.requests) == 1


@pytest.mark.parametrize("adapter", [_openai, _anthropic])
def test_status_errors_of_a_streamed_call_map_as_unstreamed(endpoint: Endpoint, adapter: Any) -> None:

    with pytest.raises(ModelHTTPError, match="500"):
        _call(adapter(endpoint), "fail-500", [])
    with pytest.raises(ModelRequestError, match="400"):
        _call(adapter(endpoint), "fail-400", [])


@pytest.mark.parametrize("adapter", [_openai, _anthropic])
def test_deltas_reach_the_sink_before_the_answer_has_ended(endpoint: Endpoint, adapter: Any) -> None:
    """With a pause between events, the first text delta reaches the sink while the endpoint has
    not yet sent the answer's last events: the sink sees the answer forming, not after it."""
    endpoint.pause_s = 0.1
    sent_when_seen: list[int] = []

    def sink(delta: Delta) -> None:
        sent_when_seen.append(endpoint.requests[-1].get("sent", 0))

    async def call() -> None:
        with deltas_to(sink):
            await adapter(endpoint)(_ask("refund?"))

    asyncio.run(call())
    total = endpoint.requests[-1]["events"]
    assert sent_when_seen[0] < total - 2, (sent_when_seen, total)
    assert sent_when_seen == sorted(sent_when_seen)


@pytest.mark.parametrize("adapter", [_openai, _anthropic])
def test_a_watched_call_records_what_an_unwatched_one_does(endpoint: Endpoint, adapter: Any) -> None:
    """Through the worker (in-memory log): the run whose model call streams to a sink records the
    same result and token counts as the run nobody watched, and the sink got the deltas."""
    app = App("streamed-records")
    app.model("m")(adapter(endpoint))

    @app.workflow("ask")
    async def ask(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.model("m", messages=_ask("refund?"))

    def record(sink: list[Delta] | None) -> tuple[Any, list[tuple[Any, ...]]]:
        with serving(app, Settings(partitions=1), sink=None if sink is None else sink.append) as (client, _):
            handle = client.submit("ask", {})
            result = handle.result(timeout=30)
            calls = [
                (e.event.result, e.event.input_tokens, e.event.output_tokens, e.event.cached_tokens)
                for e in handle.events()
                if isinstance(e.event, ModelCallCompleted)
            ]
            return result, calls

    deltas: list[Delta] = []
    assert record(deltas) == record(None)
    assert "".join(d.text for d in deltas if d.kind == "text") == "refund 41.60"
    assert [r["body"].get("stream", False) for r in endpoint.requests] == [True, False]
