"""A refund paid on approval, its payment a SQLite row: the forgery tests (tests/integration/test_forged_records.py)
count the rows to show the real refund is never paid twice, nor on a forged record's word."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from runtime import App, Context

app = App("trust-tests")


@app.tool("pay_refund", effect=True, key_args=("order", "amount"))
def pay_refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
    with sqlite3.connect(Path(os.environ["TEST_COUNTER_DIR"]) / "payments.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS paid (order_id TEXT, amount REAL, key TEXT)")
        db.execute("INSERT INTO paid VALUES (?, ?, ?)", (order, amount, idempotency_key))
    return {"refunded": amount}


@app.workflow("approved_refund")
async def approved_refund(ctx: Context, request: dict[str, Any]) -> Any:
    await ctx.wait_signal("approve")
    return await ctx.tool("pay_refund", order=request["order"], amount=request["amount"])


def payments(directory: Path) -> list[tuple[str, float, str]]:
    """The refunds paid so far (the rows), read by a test."""
    path = directory / "payments.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        return list(db.execute("SELECT order_id, amount, key FROM paid"))
