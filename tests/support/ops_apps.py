"""Workflows of the operations tests (metrics, probes, compensations), run by real worker
subprocesses (`--app support.ops_apps:app`). Scripted stand-ins for the model and the payment
service; their counters and the idempotency keys they saw are files in TEST_COUNTER_DIR, so they
survive a killed worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runtime import App, Context

app = App("ops-tests")


def _note(name: str, line: str) -> None:
    """Append ``line`` to the file ``name`` of the test's counter folder (what a service saw)."""
    with (Path(os.environ["TEST_COUNTER_DIR"]) / name).open("a") as out:
        out.write(line + "\n")


@app.model("decide")
def decide(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {"action": "refund", "amount": 41.6}


@app.tool("lookup_order")
def lookup_order(order: str, step: int) -> dict[str, Any]:
    return {"order": order, "step": step, "open": True}


@app.tool("issue_refund", effect=True, key_args=("order", "amount"))
def issue_refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    _note("issue_refund", idempotency_key)  # what the payment service would deduplicate on
    return {"refunded": amount, "order": order}


@app.workflow("refund")
async def refund(ctx: Context, request: dict[str, Any]) -> Any:
    """A model decision, ``lookups`` order lookups, one refund: 2 + lookups steps."""
    decision = await ctx.model(
        "decide", messages=[{"role": "user", "content": f"refund {request['order']}?"}]
    )
    for step in range(request["lookups"]):
        await ctx.tool("lookup_order", order=request["order"], step=step)
    return await ctx.tool("issue_refund", order=request["order"], amount=decision["amount"])
