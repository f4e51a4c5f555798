"""A model client over the official ``openai`` SDK, for OpenAI-compatible chat completions
(OpenAI, vLLM, llama.cpp, ...: ``base_url`` names the endpoint).

Register it like any model: ``app.model("planner")(OpenAIChatModel.from_settings(settings))``.
It returns the parts of the completion a workflow decides on -- message content, tool calls,
finish reason, the answering model and the provider's ``usage`` -- as plain JSON, which is what
gets recorded (the worker copies the usage into ``ModelCallCompleted``, so the audit store has
the tokens). The SDK's errors become agentlog's (``runtime.models.errors``): rate limits, 5xx,
timeouts and lost connections are retryable, a refused request (400/401/403/404) is terminal.
When someone reads the call's deltas (``runtime.models.deltas``) it streams instead, emitting them
as they come, and records the same JSON (``runtime.models.openai_stream``). Needs the ``openai``
extra.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import openai
from openai.types.chat import ChatCompletionMessage

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionStreamOptionsParam

from runtime.config import Settings
from runtime.models import openai_stream
from runtime.models.deltas import streaming
from runtime.models.errors import (
    ModelHTTPError,
    ModelRequestError,
    ModelUnreachable,
    body_text,
    status_error,
)

__all__ = ["ModelHTTPError", "ModelRequestError", "ModelUnreachable", "OpenAIChatModel", "openai_error"]

# OpenAI-compatible servers without authentication (vLLM, llama.cpp) accept any key; the SDK
# refuses to start without one.
_NO_KEY = "EMPTY"


def openai_error(error: openai.OpenAIError, where: str) -> Exception:
    """The agentlog error for an exception of the ``openai`` SDK (others are returned unchanged)."""
    if isinstance(error, openai.APIStatusError):
        return status_error(
            error.status_code, where, error.message, error.response.headers, body_text(error.body)
        )
    if isinstance(error, openai.APIConnectionError):  # APITimeoutError is one too
        return ModelUnreachable(f"{where}: {type(error).__name__}: {error}")
    return error


class OpenAIChatModel:
    """``client.chat.completions.create`` of an ``openai.AsyncOpenAI``; async, so it holds no
    thread while waiting. One client per event loop (its connection pool belongs to the loop)."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or _NO_KEY
        self._timeout = timeout_s
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIChatModel:
        return cls(
            base_url=settings.model_base_url,
            api_key=settings.model_api_key.get_secret_value(),
            model=settings.model_name,
            timeout_s=settings.model_timeout_s,
        )

    def client(self) -> openai.AsyncOpenAI:
        """The SDK client of the running event loop (made on first use in that loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key, timeout=self._timeout, max_retries=0
            )
            self._client_loop = loop
        return self._client

    async def __call__(self, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        model = params.pop("model", self.model)
        if streaming():  # someone watches this call: the same answer, read as it forms
            return await self._streamed(model, messages, params)
        try:
            completion = await self.client().chat.completions.create(
                # The workflow's JSON messages, as recorded; the endpoint is the one that validates them.
                model=model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                **params,
            )
        except openai.OpenAIError as error:
            raise openai_error(error, self.base_url) from error
        choice = completion.choices[0]
        usage = completion.usage.model_dump(mode="json", exclude_none=True) if completion.usage else {}
        return _result(choice.message, choice.finish_reason, completion.model or model, usage)

    async def _streamed(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any]:
        """``stream=True``, deltas emitted as chunks come (runtime.models.openai_stream); the result
        is the unstreamed call's."""
        params.pop("stream", None)
        options = {**(params.pop("stream_options", None) or {}), "include_usage": True}
        try:
            chunks = await self.client().chat.completions.create(
                model=model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                stream=True,
                stream_options=cast("ChatCompletionStreamOptionsParam", options),
                **params,
            )
            async with chunks:
                done = await openai_stream.read(chunks, self.base_url)
        except openai.OpenAIError as error:
            raise openai_error(error, self.base_url) from error
        return _result(done.message, done.finish_reason, done.model or model, done.usage)


def _result(
    message: ChatCompletionMessage, finish_reason: str, model: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """What a call records, streamed or not."""
    return {
        "content": message.content,
        "tool_calls": [call.model_dump(mode="json") for call in message.tool_calls or []],
        "finish_reason": finish_reason,
        "model": model,
        "usage": usage,
    }
