"""Compensations (docs/operating-metrics.md shows the registration): a refund and a reservation
registered with their undo, then a shipment that fails -- the two are undone, newest first, each
with its own idempotency key. Runs on the in-memory log: ``python -m examples.docs.compensations``."""

from __future__ import annotations

from typing import Any

from runtime import App, Context, RunError, run_local

app = App("docs-compensations")
world: list[str] = []  # what the outside services did, in order


# --8<-- [start:register]
@app.tool("issue_refund", effect=True, key_args=("order", "amount"))
def issue_refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    world.append(f"refund {order} {amount}")
    return {"refunded": amount}

@app.tool("reverse_refund", effect=True)
def reverse_refund(order: str, *, idempotency_key: str) -> dict[str, Any]:
    world.append(f"reverse refund {order}")
    return {"reversed": order}

@app.tool("reserve_stock", effect=True)
def reserve_stock(sku: str, *, idempotency_key: str) -> dict[str, Any]:
    world.append(f"reserve {sku}")
    return {"reserved": sku}

@app.tool("release_stock", effect=True)
def release_stock(sku: str, *, idempotency_key: str) -> dict[str, Any]:
    world.append(f"release {sku}")
    return {"released": sku}

@app.tool("ship", effect=True)
def ship(order: str, *, idempotency_key: str) -> dict[str, Any]:
    raise ValueError(f"no carrier for {order}")

@app.workflow("refund_and_ship")
async def refund_and_ship(ctx: Context, request: dict[str, Any]) -> Any:
    order = request["order"]
    await ctx.tool("issue_refund", order=order, amount=41.6,
                   compensate_with=("reverse_refund", {"order": order}))
    await ctx.tool("reserve_stock", sku="sku-7",
                   compensate_with=("release_stock", {"sku": "sku-7"}))
    return await ctx.tool("ship", order=order)   # raises: the two above are undone
# --8<-- [end:register]


if __name__ == "__main__":
    try:
        run_local(app, "refund_and_ship", {"order": "A-1"})
    except RunError as error:
        assert "no carrier for A-1" in str(error), error
    else:
        raise AssertionError("the shipment should have failed the run")
    assert world == ["refund A-1 41.6", "reserve sku-7", "release sku-7", "reverse refund A-1"], world
