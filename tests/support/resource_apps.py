"""A workflow whose tool leaks descriptors, for the worker's resource watch (tests/chaos/test_resource_limits.py).

``leaky``: an effect (``charge``, its key written to ``TEST_COUNTER_DIR/charges``, as the payment
service would deduplicate on it), then ``hold``, which opens descriptors and keeps them until the
process uses ``share`` of its RLIMIT_NOFILE (past 1.0 it opens until the kernel refuses: EMFILE).
Once ``TEST_COUNTER_DIR/leak-stopped`` exists, ``hold`` opens none: the leak is fixed.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context

app = App("resources")

_HELD: list[int] = []  # the leak: never closed while the process lives


def _counters() -> Path:
    return Path(os.environ["TEST_COUNTER_DIR"])


@app.tool("charge", effect=True)
def charge(order: str, *, idempotency_key: str) -> str:
    with (_counters() / "charges").open("a") as keys:
        keys.write(idempotency_key + "\n")
    return f"charged {order}"


@app.tool("hold", retry=RetryPolicy(attempts=3, initial_backoff=0.1))
def hold(share: float) -> int:
    if (_counters() / "leak-stopped").exists():
        return 0
    target = int(resource.getrlimit(resource.RLIMIT_NOFILE)[0] * share)
    while len(os.listdir("/proc/self/fd")) - 1 < target:
        _HELD.append(os.open("/dev/null", os.O_RDONLY))
    return len(_HELD)


@app.workflow("leaky")
async def leaky(ctx: Context, order: dict[str, Any]) -> str:
    await ctx.tool("charge", order=order["id"])
    held = await ctx.tool("hold", share=order["share"])
    return f"{order['id']} done, {held} held"
