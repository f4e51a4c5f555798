"""The app of the limits tests (tests/integration/test_limits.py): calls to a rate-limited
OpenAI-compatible provider and to a payment API that allows 5 calls at once, under declared limits
that each test overrides through the ``limits`` setting (``AGENTLOG_LIMITS``), as an operator would.

The worker names itself to the fakes in an ``x-worker`` header (``WORKER_NAME``), so a test can
tell which worker sent what; the fakes' addresses come from ``LIMITED_PROVIDER_URL`` and
``PAYMENTS_URL``.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import openai

from runtime.models.openai import openai_error
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context

app = App("limited")

# Patient enough that a provider answering 429 (a limit overrun) slows the run instead of failing
# it: the tests count the 429s, and a window over the limit fails them, not a run.
PATIENT = RetryPolicy(attempts=30, initial_backoff=0.5, max_backoff=5.0, timeout=30.0)
PROMPT_PADDING = "x" * 120  # with max_tokens 12: 50 tokens a call, estimated and charged alike

_client: list[openai.AsyncOpenAI] = []


def _openai() -> openai.AsyncOpenAI:
    if not _client:
        _client.append(
            openai.AsyncOpenAI(
                base_url=os.environ["LIMITED_PROVIDER_URL"] + "/v1",
                api_key="test",
                max_retries=0,
                default_headers={"x-worker": os.environ.get("WORKER_NAME", "")},
            )
        )
    return _client[0]


async def _chat(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    try:
        completion = await _openai().chat.completions.create(model="gpt", messages=messages, **params)  # type: ignore[arg-type]
    except openai.OpenAIError as error:
        raise openai_error(error, "limited provider") from error
    return {
        "content": completion.choices[0].message.content,
        "model": completion.model,
        "usage": completion.usage.model_dump(mode="json") if completion.usage else {},
    }


@app.model("gpt", retry=PATIENT)
async def gpt(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return await _chat(messages, **params)


@app.model("gpt-tenant", retry=PATIENT)
async def gpt_tenant(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return await _chat(messages, **params)


class Refused(Exception):
    """The payment API refused a call: too many in flight."""


@app.tool("pay", retry=RetryPolicy(attempts=5, initial_backoff=0.2))
async def pay(order: str) -> str:
    async with httpx.AsyncClient(timeout=30.0) as http:
        answer = await http.post(
            os.environ["PAYMENTS_URL"] + "/pay",
            json={"order": order},
            headers={"x-worker": os.environ.get("WORKER_NAME", "")},
        )
    if answer.status_code != 200:
        raise Refused(f"payments answered {answer.status_code}")
    return order


# Declared small; each test sets the capacities it means through AGENTLOG_LIMITS.
app.limit("openai", models=["gpt"], requests_per_minute=60, tokens_per_minute=20_000)
app.limit("payments", tools=["pay"], concurrent=5)
app.limit("tenant-calls", models=["gpt-tenant"], requests_per_minute=60, per="tenant")


@app.workflow("calls")
async def calls(ctx: Context, request: dict[str, Any]) -> int:
    for i in range(int(request["calls"])):
        await ctx.model(
            "gpt", messages=[{"role": "user", "content": f"call {i:03d} {PROMPT_PADDING}"}], max_tokens=12
        )
    return int(request["calls"])


@app.workflow("tenant")
async def tenant(ctx: Context, request: dict[str, Any]) -> str:
    await ctx.model(
        "gpt-tenant",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=1,
        extra_headers={"x-tenant": request["tenant"]},
    )
    return str(request["tenant"])


@app.workflow("pay")
async def payment(ctx: Context, request: dict[str, Any]) -> str:
    paid: str = await ctx.tool("pay", order=request["order"])
    return paid
