"""Workflows watched through ``Client.stream`` and queried through ``Client.query``
(tests/integration/test_run_streams.py). Files under TEST_STREAM_DIR steer them: a model call
emits its first deltas, then waits for ``release-<run>-<n>`` (its n-th invocation for the run) before
it emits the rest and returns, so a test sees deltas of a call that has not ended, without a clock.

``talk``: the ``speaker`` model (async), then the ``shout`` tool, then the ``speaker_sync`` model (a
sync adapter: its deltas leave from a pool thread). Each speaker call counts its invocations
per run in ``calls-<run>``, and says ``first try ...`` on the first, ``fresh answer ...`` after.
``progress``: exposes ``progress`` and ``phase``, calls ``shout``, exposes again, waits for ``go``.
``parks``: calls ``held`` (one at a time: the ``one_at_a_time`` limit; it returns once
``release-<run>-held`` exists), then waits for ``go`` with no timeout (a wait no record stands for).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from runtime.models.deltas import Delta, emit
from runtime.workflow.app import App
from runtime.workflow.context import Context

app = App("stream-apps")


def _dir() -> Path:
    return Path(os.environ["TEST_STREAM_DIR"])


def _invocation(run: str) -> int:
    """This call's number among the speaker calls of ``run`` (1 on), counted in a file."""
    path = _dir() / f"calls-{run}"
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


def _words(n: int, run: str) -> list[str]:
    return ["first ", "try ", "of ", run] if n == 1 else ["fresh ", "answer ", "for ", run]


def _released(run: str, n: int) -> bool:
    return (_dir() / f"release-{run}-{n}").exists()


@app.model("speaker")
async def speaker(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    run = str(messages[-1]["content"])
    n = _invocation(run)
    words = _words(n, run)
    for word in words[:2]:
        emit(Delta("text", word))
    while not _released(run, n):
        await asyncio.sleep(0.02)
    for word in words[2:]:
        emit(Delta("text", word))
    return {"text": "".join(words)}


@app.model("speaker_sync")
def speaker_sync(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    run = str(messages[-1]["content"])
    n = _invocation(run)
    words = _words(n, run)
    for word in words[:2]:
        emit(Delta("text", word))
    while not _released(run, n):
        time.sleep(0.02)
    for word in words[2:]:
        emit(Delta("text", word))
    return {"text": "".join(words)}


@app.tool("shout")
def shout(text: str) -> str:
    return text.upper()


app.limit("one_at_a_time", tools=["held"], concurrent=1)


@app.tool("held")
async def held(run: str) -> str:
    while not (_dir() / f"release-{run}-held").exists():
        await asyncio.sleep(0.02)
    return run


@app.workflow("parks")
async def parks(ctx: Context, request: dict[str, Any]) -> Any:
    await ctx.tool("held", run=ctx.run_id)
    return {"went": await ctx.wait_signal("go")}


@app.workflow("talk")
async def talk(ctx: Context, request: dict[str, Any]) -> Any:
    said = await ctx.model("speaker", messages=[{"role": "user", "content": ctx.run_id}])
    loud = await ctx.tool("shout", text=said["text"])
    if not request.get("sync"):
        return {"said": said["text"], "loud": loud}
    again = await ctx.model("speaker_sync", messages=[{"role": "user", "content": ctx.run_id}])
    return {"said": said["text"], "loud": loud, "again": again["text"]}


@app.workflow("progress")
async def progress(ctx: Context, request: dict[str, Any]) -> Any:
    ctx.expose("progress", {"step": 1, "of": 2})
    ctx.expose("phase", "working")
    await ctx.tool("shout", text="step one")
    ctx.expose("progress", {"step": 2, "of": 2})
    ctx.expose("phase", "waiting for go")
    go = await ctx.wait_signal("go", timeout=600)  # with a timeout: the wait is recorded
    return {"went": go}
