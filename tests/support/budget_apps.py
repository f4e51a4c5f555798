"""Workflows under budgets, with a scripted model that reports usage: 400 tokens a call (300 in,
100 out), answered as model ``acme-small``. Each call asks for at most ``CAP`` completion tokens,
so the estimate of a call before it starts is its short prompt plus ``CAP``.

``loop``: calls the model ``n`` times (a fresh short prompt each), no default budget.
``loop_capped``: the same under a default 1,000-token budget that fails the run.
``loop_parked``: the same under a default 2-model-call budget that parks the run.
"""

from __future__ import annotations

from typing import Any

from runtime.workflow.app import App
from runtime.workflow.budget import Budget
from runtime.workflow.context import Context

TOKENS_IN, TOKENS_OUT = 300, 100
CAP = 300  # max_tokens of each call: its estimate is the prompt's few tokens plus this
MODEL = "acme-small"

app = App("budgets")


@app.model("chat")
async def chat(messages: list[dict[str, str]], **params: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "choices": [{"message": {"role": "assistant", "content": f"answer to {messages[-1]['content']}"}}],
        "usage": {"prompt_tokens": TOKENS_IN, "completion_tokens": TOKENS_OUT},
    }


async def _loop(ctx: Context, n: int) -> int:
    for turn in range(1, n + 1):
        await ctx.model("chat", messages=[{"role": "user", "content": f"turn {turn}"}], max_tokens=CAP)
    return n


@app.workflow("loop")
async def loop(ctx: Context, n: int) -> int:
    return await _loop(ctx, n)


@app.workflow("loop_capped", budget=Budget(max_tokens=1000))
async def loop_capped(ctx: Context, n: int) -> int:
    return await _loop(ctx, n)


@app.workflow("loop_parked", budget=Budget(max_model_calls=2, on_exceeded="park"))
async def loop_parked(ctx: Context, n: int) -> int:
    return await _loop(ctx, n)
