"""A model client over the official ``anthropic`` SDK (``AsyncAnthropic``, the Messages API).

Register it like any model: ``app.model("planner")(AnthropicModel.from_settings(settings))``.
Workflow code passes chat messages as for ``runtime.models.openai`` (``{"role", "content"}``);
``system`` messages go to the API's ``system`` parameter. The result is plain JSON: the text,
the ``tool_use`` blocks as ``tool_calls`` (id, name, input), the stop reason, the answering model
and the provider's ``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``:
the worker copies them into ``ModelCallCompleted``). The SDK's errors become agentlog's
(``runtime.models.errors``): rate limits, overload, 5xx, timeouts and lost connections are
retryable, a refused request (400/401/403/404) is terminal. When someone reads the call's deltas
(``runtime.models.deltas``) it streams (``messages.stream``), emitting them as they come, and
records the same JSON (``runtime.models.anthropic_stream``). Needs the ``anthropic`` extra.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import anthropic
from anthropic.types import Message

if TYPE_CHECKING:
    from anthropic.types import MessageParam

from runtime.config import Settings
from runtime.models import anthropic_stream
from runtime.models.deltas import streaming
from runtime.models.errors import ModelUnreachable, body_text, status_error

__all__ = ["AnthropicModel", "anthropic_error"]

DEFAULT_MAX_TOKENS = 1024  # the Messages API requires a bound; a workflow passes max_tokens to change it


def anthropic_error(error: anthropic.AnthropicError, where: str) -> Exception:
    """The agentlog error for an exception of the ``anthropic`` SDK (others are returned unchanged)."""
    if isinstance(error, anthropic.APIStatusError):
        return status_error(
            error.status_code, where, error.message, error.response.headers, body_text(error.body)
        )
    if isinstance(error, anthropic.APIConnectionError):  # APITimeoutError is one too
        return ModelUnreachable(f"{where}: {type(error).__name__}: {error}")
    return error


class AnthropicModel:
    """``client.messages.create`` of an ``anthropic.AsyncAnthropic``; one client per event loop."""

    def __init__(
        self, *, api_key: str, model: str, base_url: str | None = None, timeout_s: float = 60.0
    ) -> None:
        self.base_url = base_url.rstrip("/") if base_url else None
        self.model = model
        self._api_key = api_key
        self._timeout = timeout_s
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicModel:
        """From the same settings as the OpenAI client; the base URL only if it was set (its
        default is OpenAI's), else the SDK's own endpoint."""
        explicit = "model_base_url" in settings.model_fields_set
        return cls(
            api_key=settings.model_api_key.get_secret_value(),
            model=settings.model_name,
            base_url=settings.model_base_url if explicit else None,
            timeout_s=settings.model_timeout_s,
        )

    def client(self) -> anthropic.AsyncAnthropic:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key, base_url=self.base_url, timeout=self._timeout, max_retries=0
            )
            self._client_loop = loop
        return self._client

    async def __call__(self, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        model = params.pop("model", self.model)
        system = [str(m["content"]) for m in messages if m.get("role") == "system"]
        chat = [m for m in messages if m.get("role") != "system"]
        if system and "system" not in params:
            params["system"] = "\n\n".join(system)
        params.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        where = self.base_url or "the Anthropic API"
        try:
            # The workflow's JSON messages, as recorded; the endpoint is the one that validates them.
            sent = cast("list[MessageParam]", chat)
            if streaming():  # someone watches this call: the same answer, read as it forms
                params.pop("stream", None)
                async with self.client().messages.stream(model=model, messages=sent, **params) as stream:
                    answer: Message = await anthropic_stream.read(stream, where)
            else:
                answer = await self.client().messages.create(model=model, messages=sent, **params)
        except anthropic.AnthropicError as error:
            raise anthropic_error(error, where) from error
        texts = [block.text for block in answer.content if block.type == "text"]
        calls = [
            {"id": block.id, "name": block.name, "input": block.input}
            for block in answer.content
            if block.type == "tool_use"
        ]
        return {
            "content": "".join(texts) if texts else None,
            "tool_calls": calls,
            "finish_reason": answer.stop_reason,
            "model": answer.model or model,
            "usage": answer.usage.model_dump(mode="json", exclude_none=True),
        }
