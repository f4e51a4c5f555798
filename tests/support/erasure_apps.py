"""An agent whose input, tool argument and model message carry one marker (`--app support.erasure_apps:app`).

The erasure tests grep every topic and table for the marker after `agentlog erase`. The model is
a scripted fake that reports usage; fakes live here, in tests/, never in runtime/. ``ticks`` is a run that
keeps stepping (a tool call every 50 ms) while a late-key test holds a submission beside it.
"""

from __future__ import annotations

import time
from typing import Any

from runtime import App, Context

app = App("erasure-tests")

PROMPT_TOKENS = 120
COMPLETION_TOKENS = 30


@app.model("chat")
def chat(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {
        "content": f"noted: {messages[-1]['content']}",
        "model": "fake-chat-1",
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS},
    }


@app.tool("file_note")
def file_note(customer: str, note: str) -> dict[str, Any]:
    return {"filed": note, "customer": customer}


@app.workflow("intake")
async def intake(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """One model call and one tool call about ``request["note"]``; waits for a "go" signal first
    if ``request["wait"]`` (a run that is still running when erasure is asked for)."""
    note = str(request["note"])
    if request.get("wait"):
        await ctx.wait_signal("go")
    reply = await ctx.model("chat", messages=[{"role": "user", "content": f"customer says: {note}"}])
    filed = await ctx.tool("file_note", customer="c-42", note=note)
    return {"reply": reply["content"], "filed": filed["filed"]}


TICK_S = 0.05


@app.tool("tick")
def tick(n: int) -> int:
    time.sleep(TICK_S)  # in the worker's call pool, off its event loop
    return n


@app.workflow("ticks")
async def ticks(ctx: Context, request: dict[str, Any]) -> int:
    """``request["count"]`` steps, one tool call each: a run that keeps stepping for a while."""
    count = int(request["count"])
    for n in range(count):
        await ctx.tool("tick", n=n)
    return count


@app.workflow("generations")
async def generations(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """Files ``request["note"]``, then continues as new until ``request["left"]`` reaches 0: a
    subject's run whose successors carry the subject's text on."""
    note, left = str(request["note"]), int(request["left"])
    await ctx.tool("file_note", customer="c-42", note=note)
    if left > 0:
        ctx.continue_as_new({"note": note, "left": left - 1})
    return {"filed": note}
