"""The framework-agent workload (bench/peers/agent_workload.py) as a Restate service with Restate's
PydanticAI integration (``restate.ext.pydantic.RestateAgent``), served by hypercorn in this
process (``python -m bench.peers.agent_restate_app PORT``), as bench/peers/restate_app.py serves.

As Restate asks: the agent wrapped in ``RestateAgent`` (its model requests are ``ctx.run_typed``
entries), with ``auto_wrap_tools=True`` (each function tool call one ``ctx.run_typed`` entry: the
integration's way for tools that need no context of their own). The effect's key is the run and
the step. Handler ``run`` is measured; ``run_retained`` is the same agent with the journal kept
after completion (``journal_retention``), so a benchmark can read a finished run's journal size.

``RESTATE_SERDE_CACHED=1``: the integration's serializer (``PydanticTypeAdapter.serialize``
builds a ``TypeAdapter`` of the value's type on every call) reuses one adapter per type instead --
the fix a user would make, measured as its own row beside Restate as shipped.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from datetime import timedelta
from typing import Any

import hypercorn.asyncio
import restate
from pydantic import TypeAdapter
from restate.ext.pydantic import PydanticTypeAdapter, RestateAgent

from bench.peers import agent_workload
from bench.peers.restate_app import hypercorn_config


@functools.cache
def _adapter(of: type[Any]) -> TypeAdapter[Any]:
    return TypeAdapter(of)


def _cached_serialize(self: PydanticTypeAdapter[Any], obj: Any) -> bytes:
    return b"" if obj is None else _adapter(type(obj)).dump_json(obj)


if os.environ.get("RESTATE_SERDE_CACHED") == "1":
    PydanticTypeAdapter.serialize = _cached_serialize  # type: ignore[method-assign]

agent = RestateAgent(agent_workload.agent(agent_workload.tools(agent_workload.run_key)), auto_wrap_tools=True)
service = restate.Service("Agent")


async def _run(request: dict[str, Any]) -> dict[str, Any]:
    name = str(request["run"])
    await agent.run(agent_workload.prompt(name))
    return agent_workload.result(name)


@service.handler()
async def run(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    return await _run(request)


@service.handler("run_retained", journal_retention=timedelta(hours=1))
async def run_retained(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    return await _run(request)


app = restate.app([service], protocol="bidi")


def serve(port: int) -> None:
    # configured as bench/peers/restate_app.py's service (enough HTTP/2 streams for every run)
    asyncio.run(hypercorn.asyncio.serve(app, hypercorn_config(port)))  # type: ignore[arg-type]


if __name__ == "__main__":
    serve(int(sys.argv[1]))
