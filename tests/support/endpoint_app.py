"""A workflow whose model is the tests' own OpenAI-compatible server (support.model_endpoint), for
workers run as subprocesses (`--app support.endpoint_app:app`, the server's root in
``TEST_MODEL_URL``). Apart from support.agent_apps so that other workers do not import the SDK."""

from __future__ import annotations

import os
from typing import Any

from runtime import App, Context
from runtime.models.openai import OpenAIChatModel

app = App("endpoint-tests")

# The worker's default retry policy: what a deployment gets without choosing one.
app.model("planner")(
    OpenAIChatModel(
        base_url=f"{os.environ.get('TEST_MODEL_URL', 'http://127.0.0.1:9')}/v1", api_key="", model="gpt-test"
    )
)


@app.workflow("ask")
async def ask(ctx: Context, request: dict[str, Any]) -> Any:
    """One model call; ``text`` steers the endpoint, ``order`` makes the conversation the run's own."""
    answer = await ctx.model(
        "planner",
        messages=[
            {"role": "system", "content": f"you refund order {request['order']}"},
            {"role": "user", "content": request["text"]},
        ],
    )
    return answer["content"]
