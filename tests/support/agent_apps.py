"""Workflows the runtime tests run in real worker subprocesses (`--app support.agent_apps:app`).

Scripted stand-ins for models and tools live here, in tests/, never in runtime/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime import App, CallFailed, Context, RetryPolicy

app = App("runtime-tests")


def _count(name: str) -> int:
    """Attempts so far of `name`, kept in a file so they survive the worker process."""
    path = Path(os.environ["TEST_COUNTER_DIR"]) / name
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


@app.tool("lookup")
def lookup(order: str, step: int) -> dict[str, Any]:
    return {"order": order, "step": step}


@app.tool("flaky", retry=RetryPolicy(attempts=3, initial_backoff=0.01))
def flaky(name: str) -> str:
    if _count(f"flaky-{name}") < 3:
        raise ConnectionError(f"{name}: service unavailable")
    return "third time lucky"


@app.tool("broken", retry=RetryPolicy(attempts=2, initial_backoff=0.01))
async def broken(name: str) -> str:
    _count(f"broken-{name}")
    raise ValueError(f"{name} is broken for good")


@app.workflow("divergent")
async def divergent(ctx: Context, request: dict[str, Any]) -> Any:
    # Reads the environment on purpose: restarting the worker with another value is a code change.
    await ctx.tool("lookup", order=request["order"], step=int(os.environ.get("DIVERGE_STEP", "1")))
    return await ctx.wait_signal("go")


@app.workflow("sleepy")
async def sleepy(ctx: Context, request: dict[str, Any]) -> Any:
    before = ctx.now()
    await ctx.sleep(request["sleep"])
    approval = await ctx.wait_signal("approval", timeout=request.get("timeout", 120))
    return {"approval": approval, "slept_s": (ctx.now() - before).total_seconds() >= request["sleep"]}


@app.workflow("waiter")
async def waiter(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.wait_signal("go")


@app.workflow("short")
async def short(ctx: Context, request: dict[str, Any]) -> Any:
    for step in range(request.get("steps", 3)):
        await ctx.tool("lookup", order=request["order"], step=step)
    return request["order"]


@app.workflow("retrying")
async def retrying(ctx: Context, request: dict[str, Any]) -> Any:
    lucky = await ctx.tool("flaky", name=request["name"])
    try:
        await ctx.tool("broken", name=request["name"])
    except CallFailed as failure:
        return {"lucky": lucky, "caught": failure.error_type, "attempts": failure.attempts}
    return {"lucky": lucky, "caught": None}


class Order(BaseModel):
    order: str
    amount: float


@app.workflow("typed")
async def typed(ctx: Context, request: Order) -> Any:
    return request.amount


@app.model("stall")
async def stall(messages: list[dict[str, Any]], **params: Any) -> str:
    import time

    if _count("stall") == 1:
        # Blocks the worker's whole event loop, as a long GC pause or a frozen host would: when the
        # process resumes, this returns and the worker writes before it can learn it lost anything.
        time.sleep(float(os.environ.get("STALL_SECONDS", "2")))
    return "decided"


@app.tool("charge", effect=True, key_args=("account", "cents"))
def charge(account: str, cents: int, note: str, *, idempotency_key: str) -> str:
    attempts = Path(os.environ["TEST_COUNTER_DIR"]) / "charge-attempts"
    with attempts.open("a") as out:
        out.write(f"{idempotency_key} {os.getpid()}\n")
    return "charged"


@app.workflow("charge_on_signal")
async def charge_on_signal(ctx: Context, request: dict[str, Any]) -> Any:
    await ctx.tool("lookup", order=request["account"], step=0)
    approval = await ctx.wait_signal("go")
    return await ctx.tool("charge", account=request["account"], cents=500, note=str(approval))


@app.workflow("pausing")
async def pausing(ctx: Context, request: dict[str, Any]) -> Any:
    decision = await ctx.model("stall", messages=[{"role": "user", "content": "charge?"}])
    return await ctx.tool("charge", account=request["account"], cents=1999, note=decision)


# A re-decide point. The "world" is a file the test edits: which orders are still open.
def _open_orders() -> set[str]:
    path = Path(os.environ["TEST_COUNTER_DIR"]) / "open-orders.json"
    return set(json.loads(path.read_text())) if path.exists() else set()


@app.model("triage")
def triage(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    n = _count("triage")
    stale = any("no longer valid" in str(m.get("content")) for m in messages)
    return {"action": "hold" if stale else "refund", "amount": 0 if stale else 41.6, "call": n}


@app.tool("order_open")
def order_open(decision: dict[str, Any], order: str) -> dict[str, Any]:
    is_open = order in _open_orders()
    return {"valid": is_open, "reason": "" if is_open else f"order {order} was closed meanwhile"}


@app.tool("issue_refund", effect=True, key_args=("order", "amount"))
def issue_refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    _count("issue_refund")
    with (Path(os.environ["TEST_COUNTER_DIR"]) / "refund-keys").open("a") as keys:
        keys.write(idempotency_key + "\n")  # what the payment service would deduplicate on
    return {"refunded": amount}


@app.workflow("stale_refund")
async def stale_refund(ctx: Context, request: dict[str, Any]) -> Any:
    goal = [{"role": "user", "content": f"refund order {request['order']} if it is still open"}]
    decision = await ctx.model("triage", messages=goal)
    await ctx.sleep(request["wait"])  # a supplier's answer, a human's approval: the world moves
    decision = await ctx.redecide(
        decision,
        check="order_open",
        check_args={"order": request["order"]},
        model="triage",
        messages=goal,
        within=lambda d: d["action"] in ("refund", "hold") and d["amount"] <= 41.6,
    )
    if decision["action"] == "refund":
        await ctx.tool("issue_refund", order=request["order"], amount=decision["amount"])
    return decision


@app.tool("big_report")
def big_report(order: str) -> dict[str, Any]:
    """A result far over the inline limit (a long model completion, a scraped page)."""
    n = _count("big_report")
    return {"order": order, "call": n, "text": f"line {n} of the report. " * 2_000}


@app.workflow("report")
async def report(ctx: Context, request: dict[str, Any]) -> Any:
    found = await ctx.tool("big_report", order=request["order"])
    await ctx.sleep(request["wait"])
    return {"call": found["call"], "chars": len(found["text"]), "head": found["text"][:24]}
