"""Benchmark: log bytes per step of a 200-step conversational agent, with and without dedup.

The agent resends its whole transcript every step (each prompt = a system prompt, all previous
turns, one new user turn), as chat agents do. Recorded with each distinct message once per run
(runtime.log.records.prompts), its log must grow linearly in steps: bytes per step flat from step 10 to
step 200. "Without dedup" re-encodes the same ModelCallScheduled records with every message of
every prompt stored in the record, which is what recording prompts naively costs.

A step is one model call: its ModelCallScheduled and ModelCallCompleted records, measured as Avro
key+value with the Confluent frame (the bytes the events topic holds; the encoding is
``runtime.log.schemas.serde`` with schema ids from the local catalog, the same width as the registry's).
The run goes through the real worker, machine and client on the in-memory log (no services).

Run: `python bench/conversation.py [STEPS]`. Prints JSON lines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import ModelCallScheduled
from runtime.log.records.prompts import PromptBook, rebuild_inputs
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App
from runtime.workflow.context import Context

SYSTEM = (
    "You are the support agent of an online shop. Be brief and exact. You may look up orders, "
    "explain the refund policy and escalate to a human; never promise a refund you cannot make. "
) * 4
QUESTION = "Customer, turn {n}: I still have a question about order 48211 and its refund of 41.60 -- {n}?"
ANSWER = "Agent, turn {n}: order 48211 was delivered; the refund of 41.60 is approved and on its way. " * 2


def conversation_app(steps: int) -> App:
    app = App("conversation")

    @app.model("chat")
    async def chat(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        n = sum(1 for m in messages if m["role"] == "user")
        usage = {"prompt_tokens": sum(len(m["content"]) // 4 for m in messages), "completion_tokens": 40}
        return {"content": ANSWER.format(n=n), "model": "chat-fake-1", "usage": usage}

    @app.workflow("talk")
    async def talk(ctx: Context, request: dict[str, Any]) -> int:
        transcript: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for n in range(1, steps + 1):
            transcript.append({"role": "user", "content": QUESTION.format(n=n)})
            reply = await ctx.model(
                "chat", messages=list(transcript), prompt_version="chat-v1", temperature=0.2
            )
            transcript.append({"role": "assistant", "content": reply["content"]})
        return len(transcript)

    return app


def run(steps: int) -> tuple[Settings, MemoryLog, Serde, str]:
    settings = Settings(partitions=1)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(
        conversation_app(steps), settings, log=log, serde=serde, worker_id="w1", checkpoint_interval_s=3600
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="bench", log=log, serde=serde) as client:
            run_id = client.submit("talk", {}).run_id
            client.run(run_id).result(timeout=600)
    finally:
        worker.stop()
        thread.join(timeout=10)
    return settings, log, serde, run_id


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    settings, log, serde, run_id = run(steps)
    records = [r for r in log.records(settings.events_topic, 0) if r.key == run_id.encode()]
    events = [serde.decode(r.value or b"", r.key) for r in records]
    inputs = rebuild_inputs(events)
    dedup: dict[int, int] = defaultdict(int)
    naive: dict[int, int] = defaultdict(int)
    for record, event in zip(records, events, strict=True):
        position = getattr(event, "position", None)
        if not isinstance(position, int):
            continue
        size = len(record.value or b"") + len(record.key or b"")
        dedup[position] += size
        if isinstance(event, ModelCallScheduled):
            messages = inputs[position].messages or []
            fields = PromptBook().encode(messages)  # a fresh book: every message stored again
            whole = dataclasses.replace(
                event,
                message_slots=fields.message_slots,
                new_roles=fields.new_roles,
                new_messages=fields.new_messages,
            )
            naive[position] += len(serde.encode(whole)) + len(record.key or b"")
        else:
            naive[position] += size
    for label, sizes in (("dedup", dedup), ("no_dedup", naive)):
        at = {k: sizes[k] for k in (1, 10, 50, 100, steps) if k in sizes}
        print(
            json.dumps(
                {
                    "metric": "conversation_bytes_per_step",
                    "store": label,
                    "steps": steps,
                    "bytes_at_step": at,
                    "ratio_200_vs_10": round(sizes[steps] / sizes[10], 2),
                    "total_bytes": sum(sizes.values()),
                    "target": "<= 1.5 (dedup)" if label == "dedup" else "",
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
