"""Limits declared on the app (docs/limits.md shows it in parts): a provider key shared by two
models, a payment API's calls in flight, and a per-tenant limit. Runs on the in-memory log:
``python -m examples.docs.limits``."""

from __future__ import annotations

from typing import Any

from runtime import App, Context, run_local

# --8<-- [start:declare]
app = App("docs-limits")


@app.model("gpt-4o")
async def gpt_4o(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    # A real client calls the provider (runtime.models.openai.OpenAIChatModel) and returns its usage.
    return {"content": "refund", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}


@app.model("gpt-4o-mini")
async def gpt_4o_mini(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {"content": "ok", "usage": {"prompt_tokens": 8, "completion_tokens": 1}}


@app.tool("charge")
async def charge(order: str, cents: int) -> dict[str, Any]:
    return {"order": order, "charged": cents}


# One provider key behind two models: one limit naming both.
app.limit("openai", models=["gpt-4o", "gpt-4o-mini"], requests_per_minute=500, tokens_per_minute=200_000)
# A payment API that takes 5 calls at once.
app.limit("payments", tools=["charge"], concurrent=5)
# Each customer gets the whole of this one: a customer's burst does not starve the others.
app.limit("per-customer", models=["gpt-4o"], requests_per_minute=60, per="customer")
# --8<-- [end:declare]


@app.workflow("refund")
async def refund(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    goal = [{"role": "user", "content": f"refund order {request['order']}?"}]
    decision = await ctx.model("gpt-4o", messages=goal, max_tokens=50)
    check = await ctx.model("gpt-4o-mini", messages=goal, max_tokens=5)
    charged: dict[str, Any] = await ctx.tool("charge", order=request["order"], cents=4160)
    return {"decision": decision["content"], "check": check["content"], **charged}


if __name__ == "__main__":
    result = run_local(app, "refund", {"order": "48211", "customer": "acme"})
    assert result == {"decision": "refund", "check": "ok", "order": "48211", "charged": 4160}
