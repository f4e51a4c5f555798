"""A conversational agent for the audit-record tests (`--app support.audit_apps:app`).

The model is a scripted fake that reports usage the way an OpenAI-compatible endpoint does;
fakes live here, in tests/, never in runtime/.
"""

from __future__ import annotations

from typing import Any

from runtime import App, Context

app = App("audit-tests")

SYSTEM = "You are the refund agent of an online shop. Quote the policy; never invent an order."
TURNS = 3


def answer(turn: int) -> str:
    return f"turn {turn}: order 48211 is delivered, refund 41.60 approved"


@app.model("chat")
def chat(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    turn = sum(1 for m in messages if m["role"] == "user")
    prompt_tokens = 100 * len(messages)
    return {
        "content": answer(turn),
        "model": "fake-chat-1",
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
        },
    }


@app.tool("lookup_order")
def lookup_order(order: str, fields: list[str]) -> dict[str, Any]:
    return {"order": order, "status": "delivered", "fields": fields}


@app.workflow("conversation")
async def conversation(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    order = str(request["order"])
    transcript: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(1, TURNS + 1):
        transcript.append({"role": "user", "content": f"turn {turn}: where is my refund for {order}?"})
        reply = await ctx.model("chat", messages=list(transcript), prompt_version="refund-v3", temperature=0)
        transcript.append({"role": "assistant", "content": reply["content"]})
        await ctx.tool("lookup_order", order=order, fields=["status", f"turn-{turn}"])
    return {"turns": TURNS, "last": transcript[-1]["content"]}


# Secrets in code, as deployments have them (an API key from configuration, a card from a vault
# client): the log and the store must never hold them.
CARD = "4111111111111111"
API_KEY = "sk-live-audit-0123456789abcdef"


@app.tool("charge_card", effect=True, key_args=("card", "cents"), redact=("card",))
def charge_card(card: str, cents: int, api_key: str, *, idempotency_key: str) -> dict[str, Any]:
    assert card == CARD and api_key == API_KEY  # the call itself gets the real values
    return {"charged": cents, "last4": card[-4:]}


@app.workflow("payment")
async def payment(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    await ctx.model(
        "chat",
        messages=[{"role": "user", "content": f"charge order {request['order']}"}],
        api_key=API_KEY,
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    return await ctx.tool("charge_card", card=CARD, cents=4160, api_key=API_KEY)


@app.model("bare")
def bare(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """A model function that reports usage but no model name (as many wrappers do)."""
    return {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}


@app.workflow("priced")
async def priced(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """One call to ``request["call"]``, with the call's own ``model`` parameter when given."""
    params = {"model": request["model"]} if "model" in request else {}
    await ctx.model(str(request["call"]), messages=[{"role": "user", "content": "price me"}], **params)
    return {"called": request["call"]}
