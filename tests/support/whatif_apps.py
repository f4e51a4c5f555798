"""A refund agent for the what-if tests (`--app support.whatif_apps:app`), and its next code version
(`support.whatif_apps:app_v2`, which also emails the customer after a refund).

The planner is a deterministic fake keyed on its prompt: under ``STRICT`` (the what-if's new prompt)
an order over 100 goes to a human (a ticket) instead of a refund. It reports usage as an
OpenAI-compatible endpoint does, its prompt tokens the length of its system prompt, so a changed
prompt changes the price of the call. Effects go to a SQLite file (``WHATIF_WORLD_DB``) that a test
checks is untouched by a what-if. Fakes live here, in tests/, never in runtime/.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

from runtime import App, Context

SYSTEM = "You are the refund agent. Refund every delivered order."
STRICT = (
    "You are the refund agent. Refund delivered orders; an order over 100 goes to a human: open a ticket."
)
REPLY_TOKENS = 7
SLOW_CALL_S = 0.3


def _world() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["WHATIF_WORLD_DB"], timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, kind TEXT, detail TEXT)")
    return conn


def effects(path: str) -> list[tuple[str, str, str]]:
    """Every effect in the world file at ``path``, in key order."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, kind TEXT, detail TEXT)")
        return [tuple(row) for row in conn.execute("SELECT key, kind, detail FROM effects ORDER BY key")]
    finally:
        conn.close()


def _apply(kind: str, key: str, detail: str) -> dict[str, Any]:
    conn = _world()
    try:
        conn.execute(
            "INSERT OR IGNORE INTO effects (key, kind, detail) VALUES (?, ?, ?)", (key, kind, detail)
        )
    finally:
        conn.close()
    return {"kind": kind, "applied": True}


def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    system = next(m["content"] for m in messages if m["role"] == "system")
    order = json.loads(messages[-1]["content"])
    strict = "over 100 goes to a human" in system
    decision = "create_ticket" if strict and order["amount"] > 100 else "refund"
    return {
        "content": decision,
        "model": "fake-planner-1",
        "usage": {"prompt_tokens": len(system), "completion_tokens": 3},
    }


def strict_planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """Another model (``--model planner=planner-strict``): the strict policy whatever its prompt."""
    answer = planner([{"role": "system", "content": STRICT}, messages[-1]])
    return {**answer, "model": "fake-planner-2"}


def slow_planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """Another model (``--model planner=planner-slow``): the planner, but each call takes
    ``SLOW_CALL_S`` -- a provider whose calls are the bottleneck (the starvation test)."""
    time.sleep(SLOW_CALL_S)
    return {**planner(messages), "model": "fake-planner-3"}


def writer(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {
        "content": f"done: {messages[-1]['content']}",
        "model": "fake-writer-1",
        "usage": {"prompt_tokens": 20, "completion_tokens": REPLY_TOKENS},
    }


def lookup(order: str) -> dict[str, Any]:
    return {"order": order, "status": "delivered"}


def refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    return _apply("refund", idempotency_key, f"{order}:{amount}")


def create_ticket(order: str, queue: str, *, idempotency_key: str) -> dict[str, Any]:
    return _apply("create_ticket", idempotency_key, f"{order}:{queue}")


def send_email(order: str, template: str, *, idempotency_key: str) -> dict[str, Any]:
    return _apply("send_email", idempotency_key, f"{order}:{template}")


async def _refund_flow(ctx: Context, request: dict[str, Any], *, email: bool) -> dict[str, Any]:
    order, amount = str(request["order"]), float(request["amount"])
    await ctx.tool("lookup", order=order)
    asked = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": json.dumps(request)}]
    decision = (await ctx.model("planner", messages=asked))["content"]
    if decision == "refund":
        await ctx.tool("refund", order=order, amount=amount)
        if email:
            await ctx.tool("send_email", order=order, template="refunded")
    else:
        await ctx.tool("create_ticket", order=order, queue="refunds")
    reply = await ctx.model("writer", messages=[{"role": "user", "content": decision}])
    return {"decision": decision, "reply": reply["content"]}


def _app(name: str, *, email: bool) -> App:
    made = App(name)
    made.model("planner")(planner)
    made.model("planner-strict")(strict_planner)
    made.model("planner-slow")(slow_planner)
    made.model("writer")(writer)
    # One provider key for every planner, one call in flight at a time: a what-if's calls and
    # production's wait for the same permits (the starvation test).
    made.limit("planners", models=("planner", "planner-strict", "planner-slow"), concurrent=1)
    made.tool("lookup")(lookup)
    made.tool("refund", effect=True, key_args=("order", "amount"))(refund)
    made.tool("create_ticket", effect=True, key_args=("order", "queue"))(create_ticket)
    if email:
        made.tool("send_email", effect=True, key_args=("order", "template"))(send_email)

    async def refund_agent(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        return await _refund_flow(ctx, request, email=email)

    made.workflow("refund")(refund_agent)
    return made


app = _app("whatif-tests", email=False)
app_v2 = _app("whatif-tests-v2", email=True)
