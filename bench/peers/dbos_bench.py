"""L, T and R of the end-to-end workload on DBOS 3.4 (SQLite): one JSON line on stdout.

Runs in the peers' virtualenv (bench/peers/requirements.txt), with the processes of
bench/peers/dbos_app.py, each with its state in ``--workdir`` (the system database and the tool's
SQLite file side by side):

L, T  measured inside one process (``measure``): DBOS's client is the program that runs the
      workflows (``start_workflow`` -> ``get_result``)
R     s from the start of a fresh process, after the one running the run was killed (SIGKILL)
      in its 31st tool call (bench/peers/workload.py), to the result in that fresh process (``launch``
      recovers the pending workflow; ``get_result`` polls the system database every 5 ms)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.peers.workload import crash_run, replay_counts, steps_done, wait_in_crash_step

ROOT = Path(__file__).resolve().parents[2]


def _process(workdir: Path, workload: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.peers.dbos_app", args[0], str(workdir), *args[1:]],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "E2E_DB": str(workdir / "e2e.db"),
            "E2E_WORKLOAD": workload,
            "E2E_CRASH_VICTIM": "1" if args[0] == "victim" else "0",
        },
        stdout=subprocess.PIPE,
        stderr=(workdir / f"dbos-{args[0]}.log").open("a"),
        text=True,
    )


def _answer(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, _ = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise SystemExit(f"a DBOS process failed ({process.returncode}): see its log")
    parsed: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return parsed


def recovery(workdir: Path, workload: str) -> dict[str, Any]:
    run = crash_run(uuid.uuid4().hex[:20])
    victim = _process(workdir, workload, "victim", run)
    wait_in_crash_step(str(workdir / "e2e.db"), run)  # its 31st tool call has started, and hangs
    if victim.poll() is not None:
        raise SystemExit(f"the DBOS victim exited ({victim.returncode}) before the kill")
    victim.kill()
    victim.wait()
    restarted = time.time()
    answer = _answer(_process(workdir, workload, "recover", run), timeout=300)
    assert answer["result"]["run"] == run, answer
    return {
        "R_s": round(answer["answered_at"] - restarted, 3),
        "R_tool_calls": steps_done(str(workdir / "e2e.db"), run),
        **(replay_counts(str(workdir / "e2e.db"), run) if workload == "sync" else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    parser.add_argument("--workload", choices=("async", "sync"), default="async")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    process = _process(args.workdir, args.workload, "measure", str(args.l_runs), str(args.t_runs))
    figures = _answer(process, timeout=1800)
    found = {"system": "dbos", "workload": args.workload, **figures, **recovery(args.workdir, args.workload)}
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
