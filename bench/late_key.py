"""What a sealed submission read before its data key costs the runs beside it (docs/erasure.md,
*A submission read before its key*). Prints JSON lines.

One worker on the in-memory log, one partition, contents sealed. A run that calls a 20 ms tool
in a loop is stepping; a ``RunSubmitted`` sealed under a key written nowhere yet is appended, and
its key ``--late`` seconds later. Printed per round: the steps the neighbour recorded in that
window (a worker that waits for the key on its event loop records none), and what became of the
late submission (its status and the input it started with).

Run: ``python bench/late_key.py [--rounds N] [--late S] [--code ROOT]``; ``--code`` imports the
runtime from another checkout (``/work/main``: the code before), so before and after alternate
in one sitting.
"""

# No ``from __future__ import annotations``: the workflows below are defined in a function, after
# the runtime of ``--code`` is imported, and the app reads their annotations.

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def one_round(late_s: float) -> dict[str, Any]:
    from runtime import App, Context
    from runtime.client import Client
    from runtime.config import Settings
    from runtime.errors import AgentlogError
    from runtime.log.port.memory import MemoryLog
    from runtime.log.records.events import RunSubmitted, ToolCallCompleted
    from runtime.log.schemas.serde import Serde
    from runtime.log.sealing.keys import KeyStore
    from runtime.log.sealing.sealer import Sealer
    from runtime.worker.loop import Worker

    app = App("late-key-bench")

    @app.tool("tick")
    def tick(n: int) -> int:
        time.sleep(0.02)
        return n

    @app.workflow("ticks")
    async def ticks(ctx: Context, request: dict[str, Any]) -> int:
        for n in range(int(request["count"])):
            await ctx.tool("tick", n=n)
        return int(request["count"])

    @app.workflow("echo")
    async def echo(ctx: Context, request: dict[str, Any]) -> str:
        return str(request["note"])

    settings = Settings(partitions=1, seal_contents=True)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(app, settings, log=log, serde=serde, worker_id="w", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    client = Client(settings, identity="bench", log=log, serde=Serde.offline(settings))

    def steps(run_id: str) -> int:
        return sum(
            isinstance(serde.decode(r.value), ToolCallCompleted)
            for r in log.read(settings.events_topic, 0)
            if r.key == run_id.encode() and r.value is not None
        )

    try:
        neighbour = client.submit("ticks", {"count": 400}).run_id
        while steps(neighbour) < 3:
            time.sleep(0.01)
        scratch = KeyStore(MemoryLog(settings), settings.keys_topic, 1)
        command = RunSubmitted(
            run_id="late", workflow="echo", input='{"note":"hello"}', occurred_at=0, worker="bench"
        )
        value = serde.encode(Sealer(scratch).seal(command))
        key = scratch.opening_key("late")
        log.append(settings.commands_topic, 0, b"late", value).result(5)
        before = steps(neighbour)
        time.sleep(late_s)
        during = steps(neighbour) - before
        log.append(settings.keys_topic, 0, b"late", key).result(5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                status = client.run("late").status()
            except AgentlogError as error:  # SealError, DecodeError: reported, not raised
                return {"neighbour_steps_while_waiting": during, "late_status": f"unreadable: {error}"}
            if status.status not in ("unknown", "running"):
                break
            time.sleep(0.02)
        return {
            "neighbour_steps_while_waiting": during,
            "late_status": status.status,
            "late_result": status.result,
            "late_reason": status.reason,
        }
    finally:
        client.close()
        worker.stop()
        thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--late", type=float, default=1.0)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    import runtime

    for n in range(args.rounds):
        emit(
            code=str(Path(runtime.__file__).parent.parent),
            round=n + 1,
            late_s=args.late,
            **one_round(args.late),
        )


if __name__ == "__main__":
    main()
