"""`make demo`: the refund agent end to end on the real services, with a crash at step 31.

1. a worker starts; a 40-step refund run is submitted;
2. when step 31's model call starts, the worker is killed with SIGKILL;
3. a new worker with the same identity (static membership) takes the partition back,
   replays the recorded steps 1-30 without calling anything, re-executes step 31 (in doubt)
   and finishes;
4. the outside world (a SQLite file) shows each effect applied once.

``--pydantic-ai`` (``make demo-pydantic-ai``) runs the same agent written as a PydanticAI agent
(examples/refund_pydantic_ai.py) through the same crash and recovery.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from infra.kafka_users import credentials_path
from runtime import Client, load_settings
from runtime.config import Settings

ROOT = Path(__file__).resolve().parent.parent
APPS = {"plain": "examples.refund_agent:app", "pydantic-ai": "examples.refund_pydantic_ai:app"}


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def start_worker(env: dict[str, str], log: Path, app: str = APPS["plain"]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.cli",
            "worker",
            "--app",
            app,
            "--worker-id",
            "demo-worker",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"[demo] timed out waiting for {what}")
        time.sleep(0.05)


def model_calls(db: Path, step: int) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM model_calls WHERE step = ?", (step,)).fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def role_kafka(settings: Settings, name: str) -> dict[str, str]:
    """The ``AGENTLOG_KAFKA`` settings of a role user ``infra up --secure`` made (infra.kafka_users)."""
    path = credentials_path(settings, name)
    if not path.is_file():
        raise SystemExit(f"[demo] {path} does not exist: --role-users needs `agentlog infra up --secure`")
    conf: dict[str, str] = json.loads(path.read_text())
    return conf


def main(app: str = APPS["plain"], *, role_users: bool = False) -> int:
    settings = load_settings()
    workdir = settings.state_dir / "demo" / time.strftime("%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    world = workdir / "world.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REFUND_WORLD_DB": str(world), "REFUND_HANG_AT_STEP": "31"}
    say(f"outside world: {world}; worker logs in {workdir}")
    if role_users:  # the worker as agentlog-worker, the client as agentlog-submitter
        env["AGENTLOG_KAFKA"] = json.dumps(role_kafka(settings, "agentlog-worker"))
        settings = settings.model_copy(update={"kafka": role_kafka(settings, "agentlog-submitter")})
        say("the worker runs as Kafka user agentlog-worker, the client as agentlog-submitter")

    first = start_worker(env, workdir / "worker-1.log", app)
    wait_for(lambda: '"partition_taken"' in (workdir / "worker-1.log").read_text(), 60, "the worker to join")
    client = Client(settings)
    run = client.submit("refund", {"order": "48211"})
    client.flush()
    say(f"submitted run {run.run_id}: 40 steps; effects at 14 (email), 22 (refund 41.60), 30 (ticket)")
    wait_for(lambda: model_calls(world, 31) == 1, 120, "step 31")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    say("step 31's model call started: worker killed with SIGKILL")
    say(
        f"status now: {json.dumps({k: v for k, v in run.status().as_dict().items() if k != 'result'})}"
    )

    restarted = time.monotonic()
    second = start_worker(env, workdir / "worker-2.log", app)
    try:
        result = run.result(timeout=120)
        say(f"a new worker finished the run {time.monotonic() - restarted:.2f}s after its start")
        status = run.status()
        say(f"status: {status.status}, {status.events} events, {status.bytes} bytes")
        say(f"in doubt (re-executed after the crash): {[call.as_dict() for call in status.in_doubt]}")
        with sqlite3.connect(world) as conn:
            calls = dict(conn.execute("SELECT step, COUNT(*) FROM model_calls GROUP BY step").fetchall())
            effects = conn.execute(
                "SELECT kind, COUNT(*) FROM effects GROUP BY kind ORDER BY kind"
            ).fetchall()
            attempts = conn.execute("SELECT COUNT(*) FROM effect_attempts").fetchone()[0]
        say(
            f"model calls re-executed for steps 1-30: {sum(calls[s] - 1 for s in range(1, 31))}; step 31: {calls[31]} calls"
        )
        say(f"effects applied: {dict(effects)} ({attempts} attempts)")
        say(f"recorded nonces of steps 1-3: {result['nonces'][:3]} ... (served from the log on replay)")
        say(f"try: agentlog history {run.run_id}   agentlog status {run.run_id}")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
        client.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pydantic-ai", action="store_true", help="the refund agent as a PydanticAI agent")
    parser.add_argument(
        "--role-users",
        action="store_true",
        help="on a secure cluster (infra up --secure): the worker and the client each as its role's user",
    )
    args = parser.parse_args()
    sys.exit(main(APPS["pydantic-ai" if args.pydantic_ai else "plain"], role_users=args.role_users))
