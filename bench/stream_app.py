"""The workflows bench/stream.py measures: a model that emits its deltas as it goes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from runtime import App, Context
from runtime.models.deltas import Delta, emit

app = App("bench-stream")


@app.model("paced")
async def paced(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """``chunks`` deltas ``gap_s`` apart, each carrying the time it was emitted (for the latency)."""
    for _ in range(int(params["chunks"])):
        emit(Delta("text", repr(time.time())))
        await asyncio.sleep(float(params["gap_s"]))
    return {"text": "done"}


@app.model("burst")
async def burst(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """``chunks`` deltas at once (a fast provider's stream): what streaming costs a step."""
    for i in range(int(params["chunks"])):
        emit(Delta("text", f"token{i} "))
    return {"text": "done"}


@app.workflow("paced")
async def paced_run(ctx: Context, request: dict[str, Any]) -> int:
    for _ in range(int(request["calls"])):
        await ctx.model(
            "paced", messages=[{"role": "user", "content": "go"}], chunks=request["chunks"], gap_s=0.005
        )
    return int(request["calls"])


@app.workflow("steps")
async def steps(ctx: Context, request: dict[str, Any]) -> int:
    for _ in range(int(request["steps"])):
        await ctx.model("burst", messages=[{"role": "user", "content": "go"}], chunks=request["chunks"])
    return int(request["steps"])
