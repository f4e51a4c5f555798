"""The framework-agent workload on DBOS 3.4 (SQLite system database) with PydanticAI's DBOS
integration (``pydantic_ai.durable_exec.dbos.DBOSDurability``), and its measurements
(bench/compare_agents.py runs this module in the peers' virtualenv).

As DBOS asks: the capability on the agent (its model requests are DBOS steps), the agent run
inside a ``@DBOS.workflow`` of our own, and the function tools decorated ``@DBOS.step()`` (DBOS
does not wrap function tools itself: a tool that does I/O is a step). The effect's key is the run
and the step. DBOS is a library: the process that starts a workflow runs it, so L and T are
measured inside one process (its CPU is that process's), and R with the processes of
bench/peers/dbos_bench.py's shape:

    python -m bench.peers.agent_dbos measure DIR L_RUNS T_RUNS   # L, T, CPU, B: one JSON line
    python -m bench.peers.agent_dbos victim DIR RUN              # starts RUN, waits to be killed
    python -m bench.peers.agent_dbos recover DIR RUN             # launches (recovery), awaits RUN
    python -m bench.peers.agent_dbos bench --workdir DIR ...     # all of it: one JSON line

B  bytes a step DBOS stores for a run: the content of the run's rows (SQLite ``length()`` of
   every column) in every system table keyed by the workflow id (``workflow_status``, its steps'
   ``operation_outputs`` ...), over 40 -- median of the L runs; page and index overhead not counted.
   ``B_file_per_step``: the system database's files (with its WAL) after L and T, over every
   step of every run it holds -- pages and indexes counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID
from pydantic_ai.durable_exec.dbos import DBOSDurability

from bench.peers import agent_workload
from bench.peers.dbos_bench import _answer
from bench.peers.figures import latency_and_throughput
from bench.peers.workload import crash_run, replay_counts, steps_done, wait_in_crash_step

STEPS = agent_workload.STEPS
ROOT = Path(__file__).resolve().parents[2]
agent = agent_workload.agent(agent_workload.tools(agent_workload.run_key, DBOS.step()), [DBOSDurability()])


@DBOS.workflow()
async def agent_workflow(run: str) -> dict[str, Any]:
    await agent.run(agent_workload.prompt(run))
    return agent_workload.result(run)


def _system_db(workdir: Path) -> Path:
    return workdir / "dbos-system.sqlite"


def launch(workdir: Path) -> None:
    DBOS(config={"name": "agent-bench", "system_database_url": f"sqlite:///{_system_db(workdir)}"})
    DBOS.launch()


def new_run() -> str:
    return uuid.uuid4().hex[:20]


def stored_bytes(path: Path, run: str) -> int:
    """The content bytes of ``run``'s rows in every table with a workflow id column."""
    total = 0
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
            key = next((c for c in ("workflow_uuid", "workflow_id") if c in columns), None)
            if key is None:
                continue
            size = " + ".join(f'COALESCE(length("{c}"), 0)' for c in columns)
            found = conn.execute(f'SELECT SUM({size}) FROM "{table}" WHERE "{key}" = ?', (run,)).fetchone()
            total += int(found[0] or 0)
    return total


async def one(run: str | None = None) -> str:
    run = run or new_run()
    with SetWorkflowID(run):
        handle = await DBOS.start_workflow_async(agent_workflow, run)
    await handle.get_result()
    return run


async def measure(workdir: Path, l_runs: int, t_runs: int, idle_s: float = 0.5) -> dict[str, Any]:
    for _ in range(3):
        await one()
    singles, measured = [], []
    for _ in range(l_runs):
        await asyncio.sleep(idle_s)
        started = time.time()
        measured.append(await one())
        singles.append((time.time() - started) * 1000 / STEPS)
    await asyncio.gather(*(one() for _ in range(24)))
    await asyncio.sleep(1)
    cpu_before = time.process_time()  # DBOS's runtime is this process (its client too)
    started = time.time()
    await asyncio.gather(*(one() for _ in range(t_runs)))
    elapsed = time.time() - started
    cpu = time.process_time() - cpu_before
    sizes = [stored_bytes(_system_db(workdir), run) for run in measured]
    runs = 3 + l_runs + 24 + t_runs
    on_disk = sum(f.stat().st_size for f in workdir.glob(f"{_system_db(workdir).name}*"))
    return {
        **latency_and_throughput(singles, t_runs, elapsed, cpu),
        "B_per_step": round(statistics.median(sizes) / STEPS, 1),
        "B_file_per_step": round(on_disk / (runs * STEPS), 1),
    }


async def victim(run: str) -> None:
    with SetWorkflowID(run):
        await DBOS.start_workflow_async(agent_workflow, run)
    await asyncio.sleep(3600)  # killed (SIGKILL) in the run's 31st tool call by the bench


def _process(workdir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.peers.agent_dbos", args[0], str(workdir), *args[1:]],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "E2E_DB": str(workdir / "e2e.db"),
            "E2E_CRASH_VICTIM": "1" if args[0] == "victim" else "0",
        },
        stdout=subprocess.PIPE,
        stderr=(workdir / f"dbos-{args[0]}.log").open("a"),
        text=True,
    )


def recovery(workdir: Path) -> dict[str, Any]:
    """R: the process running the crash run killed in its 31st tool call; a fresh one launched."""
    db = str(workdir / "e2e.db")
    run = crash_run(new_run())
    process = _process(workdir, "victim", run)
    wait_in_crash_step(db, run)
    if process.poll() is not None:
        raise SystemExit(f"the DBOS victim exited ({process.returncode}) before the kill")
    process.kill()
    process.wait()
    restarted = time.time()
    answer = _answer(_process(workdir, "recover", run), timeout=300)
    if answer["result"] != agent_workload.result(run):
        raise SystemExit(f"DBOS: the crashed run's result is {answer['result']!r}")
    counts = replay_counts(db, run)
    if counts["R_model_reruns"] or counts["R_duplicate_effects"]:
        raise SystemExit(f"DBOS: the recovery re-did what it must not: {counts}")
    return {
        "R_s": round(answer["answered_at"] - restarted, 3),
        "R_cpu_s": answer["cpu_s"],
        "R_tool_calls": steps_done(db, run),
        **counts,
    }


def bench(workdir: Path, l_runs: int, t_runs: int) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    figures = _answer(_process(workdir, "measure", str(l_runs), str(t_runs)), timeout=3600)
    return {"system": "dbos", **figures, **recovery(workdir)}


def main() -> None:
    if sys.argv[1] == "bench":
        parser = argparse.ArgumentParser()
        parser.add_argument("--workdir", type=Path, required=True)
        parser.add_argument("--l-runs", type=int, default=3)
        parser.add_argument("--t-runs", type=int, default=100)
        args = parser.parse_args(sys.argv[2:])
        print(json.dumps(bench(args.workdir, args.l_runs, args.t_runs)), flush=True)
        return
    mode, workdir = sys.argv[1], Path(sys.argv[2])
    launch(workdir)
    if mode == "measure":
        print(json.dumps(asyncio.run(measure(workdir, int(sys.argv[3]), int(sys.argv[4])))), flush=True)
    elif mode == "victim":
        asyncio.run(victim(sys.argv[3]))
    elif mode == "recover":
        result = DBOS.retrieve_workflow(sys.argv[3]).get_result(polling_interval_sec=0.005)
        answered = time.time()
        print(json.dumps({"answered_at": answered, "cpu_s": round(time.process_time(), 3), "result": result}))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    DBOS.destroy()


if __name__ == "__main__":
    main()
