"""An agent that sends a model one message too large for an event record (`--app support.contract_app:app`).

The model is a scripted fake; fakes live here, in tests/, never in runtime/.
"""

from __future__ import annotations

from typing import Any

from runtime import App, Context

app = App("contract-tests")

SYSTEM = {"role": "system", "content": "You read contracts and quote the clause asked about."}
CONTRACT = {"role": "user", "content": "clause 7: refunds within 30 days. " * (600 * 1024 // 34)}  # ~600 KiB
FOLLOW_UP = {"role": "user", "content": "and the refund clause?"}


def reply(messages: list[dict[str, Any]]) -> str:
    return f"read {len(messages)} messages"


@app.model("reader")
def reader(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {"content": reply(messages), "model": "fake-reader-1"}


@app.workflow("review")
async def review(ctx: Context, request: dict[str, Any]) -> int:
    """The contract, then the whole transcript again with one more question."""
    first = await ctx.model("reader", messages=[SYSTEM, CONTRACT])
    transcript = [SYSTEM, CONTRACT, {"role": "assistant", "content": first["content"]}, FOLLOW_UP]
    await ctx.model("reader", messages=transcript)
    return len(transcript)


def transcript() -> list[dict[str, Any]]:
    """The second call's prompt, as the workflow sends it."""
    first = reply([SYSTEM, CONTRACT])
    return [SYSTEM, CONTRACT, {"role": "assistant", "content": first}, FOLLOW_UP]
