"""The end-to-end workloads every runtime compared runs: 40 steps, each a call of a scripted model
and a call of a sync tool that commits one SQLite row, as a real tool writes to its own store.

Two shapes of step (``WORKLOADS``):
- ``async``: the model is async and never suspends; the tool commits one row (``planner``, ``record``);
- ``sync``: as many real agents are written (a sync SDK client): the model is sync, commits one row
  per call and returns a JSON decision with a fresh nonce (so a replay that re-ran it would show);
  the tool commits one row in ``BEGIN IMMEDIATE ... COMMIT``, and at ``EFFECT_STEPS`` it is an effect
  that also ``INSERT OR IGNORE``s its idempotency key (``sync_planner``, ``sync_record``,
  ``sync_effect``): two thread-pool calls and two commits a step.

Plain functions, imported by bench/e2e_app.py (agentlog), bench/peers/restate_app.py and
bench/peers/dbos_app.py, so the three run the same model and the same tool; nothing here imports
a runtime. The model is async and never suspends (no weights or network here). The tool blocks
on SQLite, so each runtime runs it off its event loop (agentlog's call pool, the Restate SDK's
executor, DBOS's workflow thread); it commits in WAL mode with ``synchronous=NORMAL`` (no fsync
per commit, the same for all). Rows carry wall times, so a benchmark can place a run's first
model call and last tool call against the client's submit and result (``E2E_DB`` names the file).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from typing import Any

_local = threading.local()
_DB = os.environ.get("E2E_DB", "/tmp/agentlog-e2e.db")
STEPS = 40
WORKLOADS = ("async", "sync")
EFFECT_STEPS = frozenset({14, 22, 30})  # the sync workload's effects (before the crash step)
# A crash test's process (started with E2E_CRASH_VICTIM=1) never finishes step CRASH_STEP's tool
# call of a run named crash-*: it notes that it got there (``in_crash_step``), hangs, and is killed
# there; the fresh process after it runs normally. With E2E_CRASH_VICTIM=once, only the first such
# call of each run hangs: a worker forked again by ``agentlog worker --respawn`` inherits the
# variable, and must not hang.
CRASH_STEP = 31
_VICTIM = os.environ.get("E2E_CRASH_VICTIM", "0")


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS tool_calls (run TEXT, step INTEGER, at REAL);
        CREATE TABLE IF NOT EXISTS first_model_calls (run TEXT PRIMARY KEY, at REAL);
        CREATE TABLE IF NOT EXISTS model_calls (run TEXT, step INTEGER, at REAL);
        CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run TEXT, step INTEGER, at REAL);
        CREATE TABLE IF NOT EXISTS hangs (run TEXT PRIMARY KEY);
        """
    )
    return conn


def _db() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = connect(_DB)
    return conn


async def planner(
    messages: list[dict[str, Any]], run: str = "", step: int = 0, **params: Any
) -> dict[str, Any]:
    if step == 1:  # where the run's first model call starts, for submit -> first call
        _db().execute("INSERT OR IGNORE INTO first_model_calls VALUES (?, ?)", (run, time.time()))
    return {"step": step, "next": "record"}


def record(run: str, step: int) -> dict[str, Any]:
    _hang_if_victim(run, step)
    _db().execute("INSERT INTO tool_calls VALUES (?, ?, ?)", (run, step, time.time()))
    return {"step": step, "ok": True}


def _hang_if_victim(run: str, step: int) -> None:
    if _VICTIM == "0" or step != CRASH_STEP or not run.startswith("crash-"):
        return
    noted = _db().execute("INSERT OR IGNORE INTO hangs VALUES (?)", (run,))
    if _VICTIM == "once" and noted.rowcount == 0:  # hung (and was killed) once already
        return
    threading.Event().wait()  # until the SIGKILL


def sync_planner(
    messages: list[dict[str, Any]], run: str = "", step: int = 0, **params: Any
) -> dict[str, Any]:
    _db().execute("INSERT INTO model_calls VALUES (?, ?, ?)", (run, step, time.time()))
    nxt = "effect" if step in EFFECT_STEPS else "record"
    return {"step": step, "next": nxt, "nonce": uuid.uuid4().hex}


def _commit(*statements: tuple[str, tuple[Any, ...]]) -> None:
    conn = _db()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, args in statements:
            conn.execute(sql, args)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def sync_record(run: str, step: int) -> dict[str, Any]:
    _hang_if_victim(run, step)
    _commit(("INSERT INTO tool_calls VALUES (?, ?, ?)", (run, step, time.time())))
    return {"step": step, "ok": True}


def sync_effect(run: str, step: int, idempotency_key: str) -> dict[str, Any]:
    _hang_if_victim(run, step)
    now = time.time()
    _commit(
        ("INSERT INTO tool_calls VALUES (?, ?, ?)", (run, step, now)),
        ("INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?)", (idempotency_key, run, step, now)),
    )
    return {"step": step, "ok": True, "key": idempotency_key}


def crash_run(suffix: str) -> str:
    """The name of a run whose tool call at CRASH_STEP hangs in a victim process."""
    return f"crash-{suffix}"


def steps_done(path: str, run: str) -> int:
    """How many of ``run``'s tool calls committed (a crash test waits for CRASH_STEP - 1)."""
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            found = conn.execute("SELECT COUNT(*) FROM tool_calls WHERE run = ?", (run,)).fetchone()
    except sqlite3.OperationalError:  # the tool has not created its table yet
        return 0
    return int(found[0])


def wait_in_crash_step(path: str, run: str, timeout: float = 120) -> None:
    """Wait until ``run``'s CRASH_STEP tool call has started in the victim process (and hangs
    there): the instant to kill it. SystemExit if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not _hung(path, run):
        if time.monotonic() > deadline:
            raise SystemExit(f"the crash run never reached its tool call at step {CRASH_STEP}")
        time.sleep(0.005)


def _hung(path: str, run: str) -> bool:
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            return conn.execute("SELECT 1 FROM hangs WHERE run = ?", (run,)).fetchone() is not None
    except sqlite3.OperationalError:  # no table yet
        return False


def replay_counts(path: str, run: str) -> dict[str, int]:
    """Of a recovered sync run: model calls of steps before the crash step made more than once
    (0 when replay served the log's answers); effect calls made more than once (an effect whose
    completion was not yet durable at the kill may be re-run: its key makes that harmless); and
    duplicate effects, an effect step applied under two keys (must be 0)."""
    marks = ",".join("?" * len(EFFECT_STEPS))
    effect_steps = sorted(EFFECT_STEPS)
    with sqlite3.connect(path, timeout=30) as conn:
        models = conn.execute(
            "SELECT COUNT(*) - COUNT(DISTINCT step) FROM model_calls WHERE run = ? AND step < ?",
            (run, CRASH_STEP),
        ).fetchone()
        calls = conn.execute(
            f"SELECT COUNT(*) - COUNT(DISTINCT step) FROM tool_calls WHERE run = ? AND step IN ({marks})",
            (run, *effect_steps),
        ).fetchone()
        applied = conn.execute(
            "SELECT COUNT(*) - COUNT(DISTINCT step) FROM effects WHERE run = ?", (run,)
        ).fetchone()
    return {
        "R_model_reruns": int(models[0]),
        "R_effect_calls_rerun": int(calls[0]),
        "R_duplicate_effects": int(applied[0]),
    }
