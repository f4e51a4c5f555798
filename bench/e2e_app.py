"""The end-to-end benchmark's agent: 40 steps, each a model call and a tool call that commits one
SQLite row (bench/peers/workload.py: the same model and tool Restate and DBOS run in
bench/compare.py). ``e2e`` is the async workload, ``e2e-sync`` the sync one (a sync model, a sync
tool in its own transaction, effects at workload.EFFECT_STEPS). ``e2e-openai`` calls its model
through the official ``openai`` SDK (runtime.models.openai) at ``E2E_MODEL_URL``, an
OpenAI-compatible endpoint (bench/model_server.py), as a user's agent does."""

from __future__ import annotations

import functools
import os
from typing import Any

from bench.peers import workload
from runtime import App, Context

app = App("e2e-bench")
STEPS = workload.STEPS
connect = workload.connect
planner = app.model("planner")(workload.planner)
record = app.tool("record")(workload.record)
sync_planner = app.model("sync-planner")(workload.sync_planner)
sync_record = app.tool("sync-record")(workload.sync_record)
sync_effect = app.tool("sync-effect", effect=True)(workload.sync_effect)


@functools.cache
def _sdk_model() -> Any:
    """The official SDK's client (runtime.models.openai), made at the first call: a worker that
    never runs e2e-openai neither imports the SDK nor needs an endpoint."""
    from runtime.models.openai import OpenAIChatModel

    url = os.environ.get("E2E_MODEL_URL", "http://127.0.0.1:9/v1")
    return OpenAIChatModel(base_url=url, api_key="", model="bench")


@app.model("sdk-planner")
async def sdk_planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    answer: dict[str, Any] = await _sdk_model()(messages, **params)
    return answer


@app.workflow("e2e")
async def e2e(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        await ctx.model("planner", messages=[{"role": "user", "content": f"step {step}"}], run=run, step=step)
        await ctx.tool("record", run=run, step=step)
    return {"run": run, "steps": STEPS}


@app.workflow("e2e-sync")
async def e2e_sync(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        decision = await ctx.model(
            "sync-planner", messages=[{"role": "user", "content": f"step {step}"}], run=run, step=step
        )
        tool = "sync-effect" if decision["next"] == "effect" else "sync-record"
        await ctx.tool(tool, run=run, step=step)
    return {"run": run, "steps": STEPS}


@app.workflow("e2e-openai")
async def e2e_openai(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        await ctx.model("sdk-planner", messages=[{"role": "user", "content": f"run {run}, step {step}"}])
        await ctx.tool("record", run=run, step=step)
    return {"run": run, "steps": STEPS}
