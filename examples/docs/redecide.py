"""A re-decide point (docs/writing-agents.md): a recorded decision checked before it is acted on
after a wait, and replaced -- within bounds -- only if the check says it went stale. Runs on the
in-memory log: ``python -m examples.docs.redecide``."""

from __future__ import annotations

from typing import Any

from runtime import App, Context, DecisionOutOfBounds, run_local

app = App("docs-redecide")
open_orders = {"48211"}  # the shop's state, which moves while the run waits


@app.model("planner")
async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    stale = any("no longer valid" in str(message["content"]) for message in messages)
    return {"action": "hold", "amount": 0} if stale else {"action": "refund", "amount": 41.60}


@app.tool("order_open")
async def order_open(decision: dict[str, Any], order: str) -> dict[str, Any]:
    return {"valid": order in open_orders, "reason": f"order {order} was closed meanwhile"}


# --8<-- [start:redecide]
@app.workflow("refund")
async def refund(ctx: Context, order: str) -> dict[str, Any]:
    goal = [{"role": "user", "content": f"refund order {order}?"}]
    decision = await ctx.model("planner", messages=goal)
    await ctx.sleep(0.05)  # in production: hours waiting for a supplier's signal
    try:
        decision = await ctx.redecide(
            decision,
            check="order_open",  # a read-only tool: (decision, **check_args) -> bool | {"valid", "reason"}
            check_args={"order": order},
            model="planner",
            messages=goal,  # asked again only if the check says invalid
            within=lambda d: d["action"] in ("refund", "hold") and d["amount"] <= 41.60,
        )
    except DecisionOutOfBounds:
        raise  # uncaught, the run is parked for an operator
    return dict(decision)
# --8<-- [end:redecide]


if __name__ == "__main__":
    assert run_local(app, "refund", "48211") == {"action": "refund", "amount": 41.60}
    open_orders.clear()  # the order closes: the next run's check finds its decision stale
    assert run_local(app, "refund", "48211") == {"action": "hold", "amount": 0}
