"""The floor beside bench/waiting.py's PydanticAI variant: the same procurement agent run by plain
PydanticAI, no durability, in this process -- what the framework itself costs a run. Prints the CPU
a run takes to reach its approval wait (``DeferredToolRequests``) and to complete once approved (its
two tools commit their rows, as in the benchmark).

Run: `python bench/waiting_plain.py [N]` (no services needed).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("WAITING_DB", str(Path(tempfile.mkdtemp()) / "effects.db"))

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.models.function import FunctionModel

from bench.waiting_app import record_effect
from bench.waiting_pydantic import plan

agent = Agent(FunctionModel(plan), name="procurement", output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def reserve_budget(order: str, amount: float) -> dict[str, Any]:
    return record_effect(order, "reserve_budget", f"{order}/reserve", "plain")


@agent.tool_plain(requires_approval=True)
def place_order(order: str, supplier: str) -> dict[str, Any]:
    return record_effect(order, "place_order", f"{order}/place", "plain")


async def main(n: int) -> None:
    waiting = []
    started = time.process_time()
    for i in range(n):
        waiting.append(await agent.run(f"procure the items of order plain{i}"))
    reached = time.process_time()
    for result in waiting:
        assert isinstance(result.output, DeferredToolRequests)
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {
            call.tool_call_id: True for call in result.output.approvals
        }
        await agent.run(
            message_history=result.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=approvals),
        )
    done = time.process_time()
    print(
        f"plain PydanticAI, {n} runs one after another: {1000 * (reached - started) / n:.2f} ms of CPU a run "
        f"to the wait, {1000 * (done - reached) / n:.2f} ms completing"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
