"""The end-to-end workload as a DBOS workflow (dbos 3.4, SQLite system database), and the
processes bench/peers/dbos_bench.py runs it in.

DBOS is a library: the program that starts a workflow also runs it, so its "client" is the same
process (``DBOS.start_workflow`` -> ``handle.get_result()``). Each model call and each tool call
is one step, checkpointed in the system database before the workflow goes on. The workflow is
sync, as DBOS's examples are: its steps run on the workflow's thread. ``E2E_WORKLOAD`` picks the
workflow: ``async`` (``e2e``, the default) or ``sync`` (``e2e_sync``; bench/peers/workload.py).

    python -m bench.peers.dbos_app measure DIR L_RUNS T_RUNS   # L and T, one JSON line
    python -m bench.peers.dbos_app victim DIR RUN              # starts RUN, then waits to be killed
    python -m bench.peers.dbos_app recover DIR RUN             # launches (recovery), awaits RUN
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from dbos import DBOS, SetWorkflowID

from bench.peers.figures import latency_and_throughput
from bench.peers.workload import STEPS, planner, record, sync_effect, sync_planner, sync_record

T = TypeVar("T")


def completed(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that finishes without suspending (the scripted model does), on
    the calling thread: a sync DBOS step needs no event loop for it."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("the scripted model suspended: it must finish without awaiting")


@DBOS.step()
def model_step(run: str, step: int) -> dict[str, Any]:
    return completed(planner([{"role": "user", "content": f"step {step}"}], run=run, step=step))


@DBOS.step()
def tool_step(run: str, step: int) -> dict[str, Any]:
    return record(run, step)


@DBOS.workflow()
def e2e(request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        model_step(run, step)
        tool_step(run, step)
    return {"run": run, "steps": STEPS}


@DBOS.step()
def sync_model_step(run: str, step: int) -> dict[str, Any]:
    return sync_planner([{"role": "user", "content": f"step {step}"}], run=run, step=step)


@DBOS.step()
def sync_tool_step(run: str, step: int, effect: bool) -> dict[str, Any]:
    return sync_effect(run, step, idempotency_key=f"{run}:{step}") if effect else sync_record(run, step)


@DBOS.workflow()
def e2e_sync(request: dict[str, Any]) -> dict[str, Any]:
    run = str(request["run"])
    for step in range(1, int(request.get("steps", STEPS)) + 1):
        decision = sync_model_step(run, step)
        sync_tool_step(run, step, decision["next"] == "effect")
    return {"run": run, "steps": STEPS}


WORKFLOW = {"async": e2e, "sync": e2e_sync}[os.environ.get("E2E_WORKLOAD", "async")]


def launch(workdir: Path) -> None:
    DBOS(config={"name": "e2e-bench", "system_database_url": f"sqlite:///{workdir / 'dbos-system.sqlite'}"})
    DBOS.launch()


def new_run() -> str:
    return uuid.uuid4().hex[:20]


def one(run: str | None = None) -> Any:
    run = run or new_run()
    return DBOS.start_workflow(WORKFLOW, {"run": run}).get_result()


def measure(l_runs: int, t_runs: int, idle_s: float = 0.5) -> dict[str, Any]:
    for _ in range(3):
        one()
    singles = []
    for _ in range(l_runs):
        time.sleep(idle_s)
        started = time.time()
        one()
        singles.append((time.time() - started) * 1000 / STEPS)
    for handle in [DBOS.start_workflow(WORKFLOW, {"run": new_run()}) for _ in range(24)]:
        handle.get_result()
    time.sleep(1)
    cpu_before = time.process_time()  # DBOS's runtime is this process (its client too)
    started = time.time()
    handles = [DBOS.start_workflow(WORKFLOW, {"run": new_run()}) for _ in range(t_runs)]
    for handle in handles:
        handle.get_result()
    elapsed = time.time() - started
    cpu = time.process_time() - cpu_before
    return {
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
    }


def main() -> None:
    mode, workdir = sys.argv[1], Path(sys.argv[2])
    launch(workdir)
    if mode == "measure":
        print(json.dumps(measure(int(sys.argv[3]), int(sys.argv[4]))), flush=True)
    elif mode == "victim":
        with SetWorkflowID(sys.argv[3]):
            DBOS.start_workflow(WORKFLOW, {"run": sys.argv[3]})
        time.sleep(3600)  # killed (SIGKILL) mid-run by the bench
    elif mode == "recover":
        result = DBOS.retrieve_workflow(sys.argv[3]).get_result(polling_interval_sec=0.005)
        print(json.dumps({"answered_at": time.time(), "result": result}), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    DBOS.destroy()


if __name__ == "__main__":
    main()
