"""A workflow that continues as new, for worker subprocesses (`--app support.continue_apps:app`),
and a crash point between the end of the old run and the submission of the new one.

``CONTINUE_HANG`` (set in the worker's environment) stops the worker's loop at that point until
the test kills it: ``before`` -- the old run's RunContinuedAsNew is acknowledged, the successor's
submission not produced; ``after`` -- the submission is acknowledged too (a checkpoint has not
covered it, so the next owner submits again). Either way the worker first writes the file
``$TEST_COUNTER_DIR/continue-hang`` so the test waits on a fact, not on time. Test-only: the
patch lives here, in tests/, and wraps the runtime's own Continuer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runtime import App, Context
from runtime.worker.continuation import Continuer

app = App("continue-tests")


@app.tool("work")
def work(step: int) -> int:
    path = Path(os.environ["TEST_COUNTER_DIR"]) / f"work-{step}"
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    return step * 10


@app.workflow("counter")
async def counter(ctx: Context, state: dict[str, Any]) -> dict[str, Any]:
    done = await ctx.tool("work", step=state["step"])
    total = state["total"] + done
    if state["step"] < state["last"]:
        ctx.continue_as_new({"step": state["step"] + 1, "last": state["last"], "total": total})
    return {"total": total, "steps": state["step"]}


def _hang(where: str) -> None:
    (Path(os.environ["TEST_COUNTER_DIR"]) / "continue-hang").write_text(where)
    while True:  # the event loop stops here; the test sends SIGKILL
        time.sleep(1)


_HANG = os.environ.get("CONTINUE_HANG")
if _HANG == "before":
    Continuer.submit = lambda self, owned, ended, *_: _hang("before")  # type: ignore[method-assign]
elif _HANG == "after":
    _delivered = Continuer._delivered

    def _delivered_then_hang(self: Continuer, owned: Any, ended: Any, future: Any) -> None:
        _delivered(self, owned, ended, future)
        if future.exception() is None:
            _hang("after")

    Continuer._delivered = _delivered_then_hang  # type: ignore[method-assign]
