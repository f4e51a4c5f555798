"""The rebuild benchmark's workflows: one that waits for a signal, and bursts of trivial tool steps
(the traffic of ended runs that a rebuild must not re-read)."""

from __future__ import annotations

from typing import Any

from runtime import App, Context

app = App("rebuild-bench")


@app.tool("step")
def step(n: int) -> int:
    return n


@app.workflow("wait")
async def wait(ctx: Context, request: dict[str, Any]) -> Any:
    return await ctx.wait_signal("go")


@app.workflow("burst")
async def burst(ctx: Context, request: dict[str, Any]) -> Any:
    for n in range(request["steps"]):
        await ctx.tool("step", n=n)
    return request["steps"]
