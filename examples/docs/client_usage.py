"""Driving runs from a program (docs/writing-agents.md and docs/getting-started.md show it in parts):
submit, wait, status, signals, continue-as-new followed to the end of the chain, reset and a dry fork.
Needs the services and a worker of this module's ``app``:

    agentlog worker --app examples.docs.client_usage:app --worker-id w1 &
    python -m examples.docs.client_usage

tests/integration/test_docs_service_examples.py runs it on a scratch deployment."""

from __future__ import annotations

from typing import Any

from runtime import App, Client, Context, Settings, load_settings

app = App("docs-client")
PROMPTS = {"v1": "Refund order {order}?", "v2": "Should order {order} be refunded? Answer briefly."}


@app.model("planner")
async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {"action": "refund", "asked": messages[-1]["content"]}


@app.model("planner-v2")
async def planner_v2(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    return {"action": "hold", "asked": messages[-1]["content"]}


@app.tool("refund", effect=True, key_args=("order",))
async def refund(order: str, *, idempotency_key: str) -> dict[str, Any]:
    return {"refunded": order, "key": idempotency_key}


@app.tool("handle")
async def handle(state: dict[str, Any]) -> dict[str, Any]:
    return {"handled": state["handled"] + 1}


@app.workflow("approve")
async def approve(ctx: Context, order: str) -> dict[str, Any]:
    approval = await ctx.wait_signal("approval", timeout=60)
    return {"order": order, "approved": approval["ok"]}


# --8<-- [start:fork]
@app.workflow("refund")
async def refund_workflow(ctx: Context, order: str) -> dict[str, Any]:
    model = ctx.overrides.get("model", "planner")  # a fork may ask for another model or prompt
    version = ctx.overrides.get("prompt_version", "v1")
    messages = [{"role": "user", "content": PROMPTS[version].format(order=order)}]
    decision = await ctx.model(model, messages=messages, prompt_version=version)
    if decision["action"] == "refund":
        await ctx.tool("refund", order=order)  # in a fork: recorded as {"skipped": "fork"}, never called
    return dict(decision)
# --8<-- [end:fork]


# --8<-- [start:continue]
@app.workflow("inbox")
async def inbox(ctx: Context, state: dict[str, Any]) -> dict[str, Any]:
    state = await ctx.tool("handle", state=state)
    if state["handled"] < 3:  # in production: `if ctx.history_near_limit():`
        ctx.continue_as_new(state)  # ends this run; a successor starts with `state`
    return state
# --8<-- [end:continue]


def main(settings: Settings | None = None) -> None:
    # --8<-- [start:client]
    with Client(settings or load_settings()) as client:
        run = client.submit("approve", "48211")  # one produce; returns the run's handle at once
        run.signal("approval", {"ok": True})  # client.run(run_id) is the handle of any run, by id
        assert run.result(timeout=60) == {"order": "48211", "approved": True}
        status = run.status()  # a frozen RunStatus; .as_dict() is `agentlog status --json`
        assert status.status == "completed" and not status.in_doubt
        events = run.history()  # the run's events, from Kafka, in order
        assert events[0]["type"] == "RunStarted" and events[-1]["type"] == "RunCompleted"
    # --8<-- [end:client]

        # --8<-- [start:chain]
        first = client.submit("inbox", {"handled": 0})
        assert first.result(timeout=60, follow=True) == {"handled": 3}  # the last run's result
        successor = first.status().continued_as  # "<first>.<seq>": deterministic
        assert successor is not None and client.run(successor).status().continued_from == first.run_id
        # --8<-- [end:chain]

        # --8<-- [start:reset]
        original = client.submit("refund", "48211")
        decided = original.result(timeout=60)
        again = original.reset(2)  # positions 1..: the model call is served, the refund runs again
        assert again.result(timeout=60) == decided  # ...with the key it had: refunded once
        fork = original.fork(1, {"model": "planner-v2", "prompt_version": "v2"})
        assert fork.result(timeout=60)["action"] == "hold"  # a dry run: nothing refunded
        # --8<-- [end:reset]


if __name__ == "__main__":
    main()
