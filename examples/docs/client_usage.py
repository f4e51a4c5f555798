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
        run_id = client.submit("approve", "48211")  # one produce; returns at once
        client.signal(run_id, "approval", {"ok": True})
        assert client.result(run_id, timeout=60) == {"order": "48211", "approved": True}
        status = client.status(run_id)  # a frozen RunStatus; .as_dict() is `agentlog status --json`
        assert status.status == "completed" and not status.in_doubt
        events = client.history(run_id)  # the run's events, from Kafka, in order
        assert events[0]["type"] == "RunStarted" and events[-1]["type"] == "RunCompleted"
    # --8<-- [end:client]

        # --8<-- [start:chain]
        first = client.submit("inbox", {"handled": 0})
        assert client.result(first, timeout=60, follow=True) == {"handled": 3}  # the last run's result
        successor = client.status(first).continued_as  # "<first>.<seq>": deterministic
        assert successor is not None and client.status(successor).continued_from == first
        # --8<-- [end:chain]

        # --8<-- [start:reset]
        original = client.submit("refund", "48211")
        decided = client.result(original, timeout=60)
        again = client.reset(original, 2)  # positions 1..: the model call is served, the refund runs again
        assert client.result(again, timeout=60) == decided  # ...with the key it had: refunded once
        fork = client.fork(original, 1, {"model": "planner-v2", "prompt_version": "v2"})
        assert client.result(fork, timeout=60)["action"] == "hold"  # a dry run: nothing refunded
        # --8<-- [end:reset]


if __name__ == "__main__":
    main()
