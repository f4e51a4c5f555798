"""Permits: how fast a freed permit reaches a call waiting in another process, and what an
acquire costs when no limit is near.

    python -m bench.permits [--members 3] [--seconds 10] [--hold-ms 20]

1. Handoff, across processes on Kafka: ``--members`` processes share a limit of 1 concurrent call
   (SharedPermits over a scratch deployment's limits topic; member 0 coordinates). Each keeps one
   call waiting or running, holding its permit ``--hold-ms``. For every permit that passes from
   one process to another: the time from its release to the next call's start (same host, so
   the processes' wall clocks agree). p50 and p99.
2. Cost, in this process, in one sitting: µs per call of ``acquire`` + ``release`` with three
   needs (requests/min, tokens/min, a slot) of limits far away, for LocalPermits and for
   SharedPermits holding its share; beside a baseline of the same loop awaiting a no-op.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench._deploy import ROOT, env_for
from infra.deployment import scratch_deployment
from infra.topics import drop_topics
from runtime.config import Settings, load_settings
from runtime.log.port.memory import MemoryLog
from runtime.worker.limits.local import LocalPermits
from runtime.worker.limits.permits import Need
from runtime.worker.limits.shared import SharedPermits
from runtime.workflow.limits import Limit

ONE_SLOT = {"one": Limit("one", tools=("t",), concurrent=1)}
FAR = {"far": Limit("far", models=("m",), requests_per_minute=1e9, tokens_per_minute=1e12, concurrent=10**6)}
FAR_NEEDS = [
    Need("far", None, "requests_per_minute", 1),
    Need("far", None, "tokens_per_minute", 800),
    Need("far", None, "concurrent", 1),
]


# ------------------------------------------------------------------------------ a member process
async def member(settings: Settings, index: int, seconds: float, hold_s: float) -> list[tuple[float, float]]:
    from runtime.log.kafka.backend import KafkaLog

    log = KafkaLog(settings)
    permits = SharedPermits(ONE_SLOT, log, settings.limits_topic, f"member-{index}", lease_s=3.0)
    await permits.start()
    if index == 0:
        permits.lead(1)
    calls: list[tuple[float, float]] = []  # (started, released), wall clock
    need = [Need("one", None, "concurrent", 1)]
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            # A member still waiting when the coordinator (member 0) has stopped would wait forever:
            # no one hands partition 0 on here, as the workers' group does.
            try:
                held = await asyncio.wait_for(permits.acquire(need), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
            started = time.time()
            await asyncio.sleep(hold_s)
            released = time.time()
            held.release()
            calls.append((started, released))
            await asyncio.sleep(0)  # the release's report goes out before this member asks again
    finally:
        await permits.close()
        log.flush()
        log.close()
    return calls


def run_member(args: argparse.Namespace) -> None:
    settings = Settings.model_validate_json(args.settings)
    calls = asyncio.run(member(settings, args.member, args.seconds, args.hold_ms / 1000))
    print(json.dumps({"member": args.member, "calls": calls}))


# ------------------------------------------------------------------------------ the handoff
def handoff(members: int, seconds: float, hold_ms: float) -> dict[str, Any]:
    settings = scratch_deployment(load_settings(), 1, "benchperm", register=False)
    try:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.permits",
                    "--member",
                    str(i),
                    "--settings",
                    settings.model_dump_json(),
                    "--seconds",
                    str(seconds),
                    "--hold-ms",
                    str(hold_ms),
                ],
                cwd=ROOT,
                env=env_for(settings),
                stdout=subprocess.PIPE,
            )
            for i in range(members)
        ]
        outputs = [
            json.loads(p.communicate(timeout=seconds + 60)[0].decode().strip().splitlines()[-1])
            for p in procs
        ]
    finally:
        drop_topics(settings)
    events = sorted((start, end, out["member"]) for out in outputs for start, end in out["calls"])
    overlaps = sum(1 for a, b in itertools.pairwise(events) if b[0] < a[1] - 1e-4)
    gaps = [
        (b[0] - a[1]) * 1000 for a, b in itertools.pairwise(events) if a[2] != b[2]
    ]  # the permit moved to another process
    quantiles = statistics.quantiles(gaps, n=100) if len(gaps) >= 2 else [float("nan")] * 99
    return {
        "members": members,
        "calls": len(events),
        "calls_per_member": [len(out["calls"]) for out in outputs],
        "handoffs_across_processes": len(gaps),
        "handoff_p50_ms": round(statistics.median(gaps), 2) if gaps else None,
        "handoff_p99_ms": round(quantiles[98], 2),
        "overlapping_calls": overlaps,  # two calls in flight at once: must be 0
    }


# ------------------------------------------------------------------------------ the fast path
async def fast_path_cost(n: int = 200_000) -> dict[str, float]:
    async def noop() -> None:
        return None

    started = time.perf_counter()
    for _ in range(n):
        await noop()
    baseline = (time.perf_counter() - started) / n * 1e6

    local = LocalPermits(FAR)
    started = time.perf_counter()
    for _ in range(n):
        held = await local.acquire(FAR_NEEDS)
        held.correct("tokens_per_minute", 700)
        held.release()
    local_us = (time.perf_counter() - started) / n * 1e6

    settings = Settings(partitions=1)
    memory = MemoryLog(settings)
    shared = SharedPermits(FAR, memory, settings.limits_topic, "w", lease_s=6.0)
    await shared.start()
    shared.lead(1)
    while shared.blocking(FAR_NEEDS) is not None:
        await asyncio.sleep(0.01)
    started = time.perf_counter()
    for _ in range(n):
        shared_held = await shared.acquire(FAR_NEEDS)
        shared_held.correct("tokens_per_minute", 700)
        shared_held.release()
    shared_us = (time.perf_counter() - started) / n * 1e6
    await shared.close()
    return {
        "baseline_await_noop_us": round(baseline, 3),
        "local_acquire_release_us": round(local_us, 3),
        "shared_acquire_release_us": round(shared_us, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--member", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.member is not None:
        run_member(args)
        return
    cost = asyncio.run(fast_path_cost())
    print(json.dumps({"fast_path": cost}))
    print(json.dumps({"handoff": handoff(args.members, args.seconds, args.hold_ms)}))


if __name__ == "__main__":
    main()
