"""The end-to-end workload as a Restate service (restate-sdk), served by hypercorn in this process
(``python -m bench.peers.restate_app PORT``): hypercorn's command line serves from a child process,
which a SIGKILL of the process started would leave serving.

Each model call and each tool call is one ``ctx.run`` (journaled by the Restate server before the
handler goes on); the sync tool runs in the SDK's executor, off the event loop. ``run`` is the async
workload, ``run_sync`` the sync one (bench/peers/workload.py); an effect's idempotency key is the
run and step, as agentlog derives its from the run and the arguments.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import hypercorn.asyncio
import hypercorn.config
import restate

from bench.peers.workload import STEPS, planner, record, sync_effect, sync_planner, sync_record

service = restate.Service("E2E")


@service.handler()
async def run(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    name = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        messages = [{"role": "user", "content": f"step {step}"}]
        await ctx.run_typed("planner", planner, restate.RunOptions(), messages=messages, run=name, step=step)
        await ctx.run_typed("record", record, restate.RunOptions(), run=name, step=step)
    return {"run": name, "steps": STEPS}


@service.handler("run_sync")
async def run_sync(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    name = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        messages = [{"role": "user", "content": f"step {step}"}]
        decision = await ctx.run_typed(
            "planner", sync_planner, restate.RunOptions(), messages=messages, run=name, step=step
        )
        if decision["next"] == "effect":
            key = f"{name}:{step}"
            await ctx.run_typed("effect", sync_effect, restate.RunOptions(), run=name, step=step, idempotency_key=key)
        else:
            await ctx.run_typed("record", sync_record, restate.RunOptions(), run=name, step=step)
    return {"run": name, "steps": STEPS}


# Bidirectional streaming over HTTP/2, as Restate's own Python examples serve: a step's journal
# entry and the next step's start share the open stream instead of one request each.
app = restate.app([service], protocol="bidi")


# hypercorn's defaults are for browsers, not for a Restate server that multiplexes every invocation
# on one HTTP/2 connection: at most 100 concurrent streams (with 200 runs in flight, the other 100
# wait for a stream), the connection closed after 1,000 requests and after 5 s idle. Restate's own
# Python SDK serves its test services with all three unbounded (restatedev/sdk-python,
# hypercorn-config.toml, and its MAX_CONCURRENT_STREAMS variable); so do we. E2E_H2_MAX_STREAMS
# overrides the stream limit (100: hypercorn's default, for an A/B; docs/benchmarks.md).
UNBOUNDED = 2**31 - 1


def hypercorn_config(port: int) -> hypercorn.config.Config:
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.h2_max_concurrent_streams = int(os.environ.get("E2E_H2_MAX_STREAMS", UNBOUNDED))
    config.keep_alive_max_requests = UNBOUNDED
    config.keep_alive_timeout = UNBOUNDED
    return config


def serve(port: int) -> None:
    asyncio.run(hypercorn.asyncio.serve(app, hypercorn_config(port)))  # type: ignore[arg-type]


if __name__ == "__main__":
    serve(int(sys.argv[1]))
