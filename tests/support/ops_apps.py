"""Workflows of the operations tests (metrics, probes, compensations), run by real worker
subprocesses (`--app support.ops_apps:app`). Scripted stand-ins for the model and the payment
service; their counters and the idempotency keys they saw are files in TEST_COUNTER_DIR, so they
survive a killed worker."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runtime import App, Context, RetryPolicy

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


# -- a saga: refund and reserve, each with its compensation, then a shipment that fails --------------
def _effect(name: str, idempotency_key: str) -> None:
    """What the service saw: the key, noted before the work; a worker started with
    HANG_IN=<name> then hangs inside the call (the test SIGKILLs it there)."""
    _note(name, idempotency_key)
    if os.environ.get("HANG_IN") == name:
        time.sleep(600)


@app.tool("reverse_refund", effect=True)
def reverse_refund(order: str, *, idempotency_key: str) -> dict[str, Any]:
    _effect("reverse_refund", idempotency_key)
    return {"reversed": order}


@app.tool("reserve_stock", effect=True)
def reserve_stock(sku: str, *, idempotency_key: str) -> dict[str, Any]:
    _effect("reserve_stock", idempotency_key)
    return {"reserved": sku}


@app.tool("release_stock", effect=True)
def release_stock(sku: str, *, idempotency_key: str) -> dict[str, Any]:
    _effect("release_stock", idempotency_key)
    return {"released": sku}


@app.tool("ship", retry=RetryPolicy(attempts=1))
def ship(order: str) -> dict[str, Any]:
    raise ValueError(f"no courier for order {order}")


@app.workflow("refund_saga")
async def refund_saga(ctx: Context, request: dict[str, Any]) -> Any:
    order = request["order"]
    await ctx.tool(
        "issue_refund", order=order, amount=41.6, compensate_with=("reverse_refund", {"order": order})
    )
    await ctx.tool("reserve_stock", sku="sku-7", compensate_with=("release_stock", {"sku": "sku-7"}))
    return await ctx.tool("ship", order=order)


@app.workflow("refund_saga_waits")
async def refund_saga_waits(ctx: Context, request: dict[str, Any]) -> Any:
    """The saga's two effects, then a wait for the signal "go" (a cancellation comes instead)."""
    order = request["order"]
    await ctx.tool(
        "issue_refund", order=order, amount=41.6, compensate_with=("reverse_refund", {"order": order})
    )
    await ctx.tool("reserve_stock", sku="sku-7", compensate_with=("release_stock", {"sku": "sku-7"}))
    return await ctx.wait_signal("go")
