"""The end-to-end benchmark's agent: 40 steps, each a model call and a tool call that commits one
SQLite row (bench/peers/workload.py: the same model and tool Restate and DBOS run in
bench/compare.py)."""

from __future__ import annotations

from typing import Any

from bench.peers import workload
from runtime import App, Context

app = App("e2e-bench")
STEPS = workload.STEPS
connect = workload.connect
planner = app.model("planner")(workload.planner)
record = app.tool("record")(workload.record)


@app.workflow("e2e")
async def e2e(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        await ctx.model("planner", messages=[{"role": "user", "content": f"step {step}"}], run=run, step=step)
        await ctx.tool("record", run=run, step=step)
    return {"run": run, "steps": STEPS}
