"""Watching a run and querying it (docs/writing-agents.md, "Watching a run"): needs Kafka and a
worker serving ``app`` (tests/integration/test_docs_service_examples.py runs it)."""

from __future__ import annotations

import json
import time
from typing import Any

from runtime import App, Client, Context, Settings, load_settings
from runtime.models.deltas import Delta, emit

app = App("docs-watching")


@app.model("writer")
async def writer(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    for chunk in ("Refund ", "approved ", "for A-1."):
        emit(Delta("text", chunk))  # what a watcher sees as it forms (an adapter streaming does this)
    return {"text": "Refund approved for A-1."}


@app.tool("load")
def load(name: str) -> int:
    return len(name)


@app.workflow("refund")
async def refund(ctx: Context, request: dict[str, Any]) -> str:
    answer = await ctx.model("writer", messages=[{"role": "user", "content": request["order"]}])
    return str(answer["text"])


# --8<-- [start:expose]
@app.workflow("ingest")
async def ingest(ctx: Context, files: list[str]) -> Any:
    for n, name in enumerate(files, start=1):
        await ctx.tool("load", name=name)
        ctx.expose("progress", {"done": n, "of": len(files)})
    ctx.expose("phase", "waiting for approval")
    return await ctx.wait_signal("approve", timeout=86_400)


# --8<-- [end:expose]


def main(settings: Settings | None = None) -> None:
    # --8<-- [start:stream]
    with Client(settings or load_settings()) as client:
        run = client.submit("refund", {"order": "A-1"})
        said = ""
        for event in client.stream(run.run_id):  # or run.stream(); `async for` over client.astream(...)
            if event.kind == "delta":
                said += event.data["text"]  # print(event.data["text"], end="", flush=True)
            elif event.kind == "superseded":
                said = ""  # a retry or a crash replaced that attempt: what it said is void
            elif event.kind == "completed" and event.position == 1:
                said = json.loads(event.data["result"])["text"]  # the recorded answer: the truth
        assert event.kind == "ended" and said == run.result() == "Refund approved for A-1."
        # --8<-- [end:stream]

        # --8<-- [start:query]
        batch = client.submit("ingest", ["a.csv", "b.csv"])
        while _phase(client, batch.run_id) != "waiting for approval":
            time.sleep(0.1)  # the run has not got there yet
        assert client.query(batch.run_id, "progress") == {"done": 2, "of": 2}  # at once; the run waits
        batch.signal("approve", True)
        assert batch.result() is True
        # --8<-- [end:query]


def _phase(client: Client, run_id: str) -> Any:
    from runtime.client import QueryError

    try:
        return client.query(run_id, "phase")
    except QueryError:  # nothing exposed yet
        return None


if __name__ == "__main__":
    main()
