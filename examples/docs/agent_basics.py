"""The workflow API in one agent (docs/writing-agents.md shows it in parts): models, read-only and
effecting tools, redacted arguments, a durable timer, a signal wait with a timeout, parallel calls,
deterministic time and ids, and a patch marker. Runs on the in-memory log: ``python -m
examples.docs.agent_basics``."""

from __future__ import annotations

from typing import Any

from runtime import App, Context, RetryPolicy, run_local

# --8<-- [start:register]
app = App("docs-basics")
charges: dict[str, int] = {}  # the payment service's table, keyed by idempotency key


@app.model("planner")
async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    # A real planner calls an LLM (runtime.models.openai.OpenAIChatModel); its answer is recorded.
    return {"action": "charge", "cents": 4160, "why": f"{len(messages)} message(s) read"}


@app.tool("lookup")
async def lookup(order: str) -> dict[str, Any]:  # read-only: no key, replayed from the log
    return {"order": order, "status": "delivered"}


@app.tool("charge", effect=True, key_args=("card", "cents"), redact=("card",), retry=RetryPolicy(attempts=3))
def charge(card: str, cents: int, api_key: str, *, idempotency_key: str) -> dict[str, Any]:
    # The key is derived from the run, the tool and its key arguments: a retry, a replay after a
    # crash or a reset sends the same one, and the service applies the charge once.
    applied = idempotency_key not in charges
    charges.setdefault(idempotency_key, cents)
    return {"applied": applied}  # card and api_key are recorded as "[redacted sha256:...]"
# --8<-- [end:register]


# --8<-- [start:workflow]
@app.workflow("order")
async def order(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    goal = [{"role": "user", "content": f"order {request['order']}: refund?"}]
    decision = await ctx.model("planner", messages=goal, prompt_version="v1", temperature=0)
    found, again = await ctx.gather(  # two calls in parallel; results in issue order
        ctx.tool("lookup", order=request["order"]),
        ctx.tool("lookup", order=request["order"] + "-b"),
    )
    await ctx.sleep(0.05)  # a durable timer: a restarted worker resumes it, no thread held
    try:
        approval = await ctx.wait_signal("approval", timeout=0.05)
    except TimeoutError:
        approval = {"ok": True, "by": "default"}  # nobody signalled in time
    if approval["ok"] and decision["action"] == "charge":
        await ctx.tool("charge", card=request["card"], cents=decision["cents"], api_key="sk-demo")
    return {
        "status": found["status"] if found["status"] == again["status"] else "mixed",
        "approval": approval,
        "at": ctx.now().isoformat(),  # recorded time: the same on every replay
        "ticket": str(ctx.uuid()),  # derived from the run: the same on every replay
        "sample": ctx.random() < 1.0,  # seeded by the run id
    }
# --8<-- [end:workflow]


# --8<-- [start:patched]
@app.workflow("notify")
async def notify(ctx: Context, request: dict[str, Any]) -> str:
    if ctx.patched("lookup-first"):  # new runs take the new path; runs recorded before keep theirs
        await ctx.tool("lookup", order=request["order"])
    decision = await ctx.model("planner", messages=[{"role": "user", "content": "notify?"}])
    return str(decision["why"])
# --8<-- [end:patched]


if __name__ == "__main__":
    result = run_local(app, "order", {"order": "48211", "card": "4111111111111111"})
    assert result["status"] == "delivered" and result["approval"]["by"] == "default"
    assert list(charges.values()) == [4160]
    assert run_local(app, "notify", {"order": "48211"}) == "1 message(s) read"
