"""Bytes a step of the refund-40 agent's history: native and PydanticAI, on the in-memory log.

Each agent runs once in this process (the same worker, serde and records as on Kafka; schema ids
from the local catalog, so each record's Confluent frame is the same size). Prints one JSON line
per agent: the Avro key+value bytes of the run's records in the events topic, the bytes of its
payloads (out-of-line results and messages), both per step, and the record count.

Run: `python bench/record_bytes.py` (no services needed).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App

STEPS = 40


def measure(app: App, label: str) -> dict[str, Any]:
    settings = Settings(partitions=1)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(
        app,
        settings,
        log=log,
        serde=serde,
        worker_id="bench",
        checkpoint_interval_s=3600,
        shared_limits=False,
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="bench", log=log, serde=serde) as client:
            handle = client.submit("refund", {"order": "48211", "steps": STEPS})
            handle.result(timeout=120)
            run_id = handle.run_id
    finally:
        worker.stop()
        thread.join(timeout=10)
    key = run_id.encode()
    records = [r for r in log.records(settings.events_topic, 0) if r.key == key]
    events = sum(len(r.key or b"") + len(r.value or b"") for r in records)
    payloads = sum(len(r.key or b"") + len(r.value or b"") for r in log.records(settings.payloads_topic, 0))
    return {
        "agent": label,
        "records": len(records),
        "events_bytes": events,
        "payload_bytes": payloads,
        "bytes_per_step": round((events + payloads) / STEPS, 1),
    }


def main() -> None:
    from examples import refund_agent, refund_pydantic_ai

    native = measure(refund_agent.app, "native")
    framework = measure(refund_pydantic_ai.app, "pydantic_ai")
    for row in (native, framework):
        print(json.dumps(row), flush=True)
    print(
        json.dumps(
            {"ratio": round(framework["bytes_per_step"] / native["bytes_per_step"], 2), "target": "<= 2"}
        )
    )


if __name__ == "__main__":
    main()
