"""A model client for OpenAI-compatible chat-completions endpoints (OpenAI, vLLM, llama.cpp, ...).

Register it like any model: ``app.model("planner")(OpenAIChatModel.from_settings(settings))``.
It returns the parts of the completion a workflow decides on -- message content, tool calls,
finish reason, usage -- as plain JSON, which is what gets recorded.
"""

from __future__ import annotations

from typing import Any

import httpx

from runtime.config import Settings
from runtime.errors import RetryableError, TerminalError


class ModelHTTPError(RetryableError):
    """The endpoint answered 429 or 5xx: worth another attempt."""


class ModelRequestError(TerminalError):
    """The endpoint refused the request (4xx other than 429): retrying will not help."""


class OpenAIChatModel:
    """``POST {base_url}/chat/completions`` with httpx; async, so it holds no thread while waiting."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIChatModel:
        return cls(
            base_url=settings.model_base_url,
            api_key=settings.model_api_key.get_secret_value(),
            model=settings.model_name,
            timeout_s=settings.model_timeout_s,
        )

    async def __call__(self, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        body = {"model": params.pop("model", self.model), "messages": messages, **params}
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            response = await client.post(
                f"{self.base_url}/chat/completions", json=body, headers=self._headers
            )
        if response.status_code == 429 or response.status_code >= 500:
            raise ModelHTTPError(f"{response.status_code} from {self.base_url}: {response.text[:300]}")
        if response.status_code >= 400:
            raise ModelRequestError(f"{response.status_code} from {self.base_url}: {response.text[:300]}")
        data = response.json()
        choice = data["choices"][0]
        message = choice.get("message", {})
        return {
            "content": message.get("content"),
            "tool_calls": message.get("tool_calls") or [],
            "finish_reason": choice.get("finish_reason"),
            "model": data.get("model", body["model"]),
            "usage": data.get("usage", {}),
        }
