"""The purchase-order apps of the P-204 story (seed 003), one per code version, for real workers
(`--app support.po_apps:app_v1` ...) and for `agentlog upgrade check`.

- ``app_v1``: Monday's code. Drafts the order with a model call (prompt v1), looks the vendor up,
  checks the budget, waits for ``approve``, places the order.
- ``app_v2``: Wednesday's deploy. The drafting prompt reworded and ``prompt_version`` v2; a
  compliance check behind ``ctx.patched("compliance-check")``.
- ``app_safe``: v1 plus a new workflow (a safe change).
- ``app_reordered``: v1 with the vendor lookup and the budget check swapped (a real divergence).

The order tool appends a row to a SQLite file in ``$TEST_COUNTER_DIR`` (one row per execution),
so a test counts how often the order was really placed.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from runtime import App, Context

PROMPT_V1 = "Draft a purchase order for {quantity} x {item}."
PROMPT_V2 = "Draft a purchase order for {quantity} x {item}; name the cost centre and the approver."


def orders_db() -> Path:
    return Path(os.environ["TEST_COUNTER_DIR"]) / "orders.sqlite"


def placed_orders(db: Path) -> list[tuple[str, str, str]]:
    """(run_id, item, idempotency_key) of every order the tool placed."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT run_id, item, idempotency_key FROM orders ORDER BY rowid"))


def build(
    name: str,
    *,
    prompt: str = PROMPT_V1,
    prompt_version: str = "v1",
    compliance_patch: bool = False,
    reorder: bool = False,
    extra_workflow: bool = False,
) -> App:
    app = App(name)

    @app.model("drafter")
    def drafter(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return {"item": "paper", "quantity": 40, "vendor": "acme", "draft": messages[-1]["content"]}

    @app.tool("lookup_vendor")
    def lookup_vendor(vendor: str) -> dict[str, Any]:
        return {"vendor": vendor, "approved": True}

    @app.tool("check_budget")
    def check_budget(amount: int) -> bool:
        return amount < 1000

    @app.tool("compliance_check")
    def compliance_check(vendor: str, item: str) -> dict[str, Any]:
        return {"vendor": vendor, "item": item, "compliant": True}

    @app.tool("place_order", effect=True, key_args=("run_id",))
    def place_order(run_id: str, item: str, quantity: int, *, idempotency_key: str) -> str:
        with sqlite3.connect(orders_db()) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (run_id TEXT, item TEXT, idempotency_key TEXT)")
            conn.execute("INSERT INTO orders VALUES (?, ?, ?)", (run_id, item, idempotency_key))
        return f"PO-{run_id}"

    @app.workflow("purchase_order")
    async def purchase_order(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
        # Decided where the run starts: a run recorded before the marker keeps the old path even
        # though it reaches the compliance check live, after the approval.
        compliance = compliance_patch and ctx.patched("compliance-check")
        draft = await ctx.model(
            "drafter",
            messages=[{"role": "user", "content": prompt.format(**request)}],
            prompt_version=prompt_version,
            temperature=0,
        )
        if reorder:
            budget_ok = await ctx.tool("check_budget", amount=request["quantity"] * 10)
            vendor = await ctx.tool("lookup_vendor", vendor=draft["vendor"])
        else:
            vendor = await ctx.tool("lookup_vendor", vendor=draft["vendor"])
            budget_ok = await ctx.tool("check_budget", amount=request["quantity"] * 10)
        approval = await ctx.wait_signal("approve")
        checked = None
        if compliance:
            checked = await ctx.tool("compliance_check", vendor=draft["vendor"], item=request["item"])
        order = await ctx.tool(
            "place_order", run_id=ctx.run_id, item=request["item"], quantity=request["quantity"]
        )
        return {
            "order": order,
            "approved_by": approval["by"],
            "vendor": vendor["vendor"],
            "budget_ok": budget_ok,
            "compliance": checked,
        }

    if extra_workflow:

        @app.workflow("vendor_report")
        async def vendor_report(ctx: Context, request: dict[str, Any]) -> Any:
            return await ctx.tool("lookup_vendor", vendor=request["vendor"])

    return app


app_v1 = build("po-v1")
app_v2 = build("po-v2", prompt=PROMPT_V2, prompt_version="v2", compliance_patch=True)
app_safe = build("po-safe", extra_workflow=True)
app_reordered = build("po-reordered", reorder=True)
