"""``agentlog worker --respawn``: a parent that forks the worker and forks it again when it dies.

A worker killed by the kernel (OOM at step 31 of 40) is normally restarted by its process
manager, and the new process spends most of its recovery importing pydantic, confluent-kafka's
registry client and the user's app (~0.7 s of a ~1.1 s recovery on a 2-vCPU machine). The
supervisor pays those imports once: it imports everything, then forks the worker; when the
worker dies, a fresh fork starts with every module already loaded, joins the group with the
same ``group.instance.id`` and takes its partitions straight back.

Fork safety: the parent never creates a Kafka client, a registry client or a thread -- each
child builds its own after the fork. The parent only waits, forwards SIGTERM/SIGINT to the
child, and stops when the child exits cleanly. A child that keeps dying is respawned with a
growing delay, so a worker that crashes at start-up does not spin.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

from runtime import stagemarks

log = logging.getLogger("agentlog.supervisor")

# A child that lived this long before dying is respawned at once; a run of quicker deaths backs off.
HEALTHY_AFTER_S = 10.0
MAX_BACKOFF_S = 5.0
FIRST_BACKOFF_S = 0.1


def respawn_delay(quick_deaths: int) -> float:
    """Seconds to wait before respawning after ``quick_deaths`` deaths in a row, each within
    ``HEALTHY_AFTER_S`` of its start. The first is respawned at once: a worker killed once (OOM at
    a step) is a crash to recover from now, and its runs wait for the respawn; only a worker that
    dies again straight after is one that crashes at start-up, and its respawns slow down."""
    if quick_deaths <= 1:
        return 0.0
    return float(min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (quick_deaths - 2)))


def supervise(run_child: Callable[[], int]) -> int:
    """Fork ``run_child`` (in the child; its return value is the exit code) until it exits 0 or
    the supervisor is asked to stop. Returns the last child's exit code (0 on a requested stop)."""
    stopping = False
    child = 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child:
            os.kill(child, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    # Everything imported so far is shared with every child; frozen, the children's garbage
    # collections do not walk (and so do not copy-on-write) those pages.
    gc.freeze()
    quick_deaths = 0
    try:
        while True:
            started = time.monotonic()
            child = os.fork()
            if child == 0:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                code = 1
                try:
                    code = run_child()
                finally:
                    stagemarks.write()  # os._exit skips atexit, which writes them otherwise
                    os._exit(code)
            status = _wait(child)
            code = os.waitstatus_to_exitcode(status)
            if stopping or code == 0:
                return 0 if stopping else code
            lived = time.monotonic() - started
            quick_deaths = 0 if lived >= HEALTHY_AFTER_S else quick_deaths + 1
            backoff = respawn_delay(quick_deaths)
            log.warning(
                "worker pid %s died (%s) after %.1f s; respawning in %.1f s",
                child,
                f"signal {-code}" if code < 0 else f"exit {code}",
                lived,
                backoff,
            )
            time.sleep(backoff)
            if stopping:
                return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(pid: int) -> int:
    """Until the child exits: no timeout, waiting for it is the supervisor's job, and a child out of
    a resource exits on its own (runtime.worker.resources), so this wait ends with it."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return status
        except InterruptedError:  # a forwarded signal interrupted the wait; keep waiting
            continue
