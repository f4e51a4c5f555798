"""SharedPermits on real Kafka: three members, each with its own producer and tail (as three workers
have), share one concurrency limit and one rate. In flight never exceeds the limit and everyone
proceeds; the rate split between them stays within its bound in every window."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from infra.deployment import scratch_deployment
from infra.topics import drop_topics
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.worker.limits.permits import Need
from runtime.worker.limits.shared import SharedPermits
from runtime.workflow.limits import Limit

pytestmark = pytest.mark.integration

LIMITS = {
    "pay": Limit("pay", tools=("charge",), concurrent=5),
    "api": Limit("api", models=("m",), requests_per_minute=600),  # 10 a second
}
SLOT = [Need("pay", None, "concurrent", 1)]
REQUEST = [Need("api", None, "requests_per_minute", 1)]
LEASE_S = 3.0


@pytest.fixture(scope="module")
def limits_deployment(services: Settings) -> Iterator[Settings]:
    settings = scratch_deployment(services, partitions=1, prefix="perm", register=False)
    yield settings
    drop_topics(settings)


@asynccontextmanager
async def members(settings: Settings, n: int = 3) -> AsyncIterator[list[SharedPermits]]:
    logs = [KafkaLog(settings) for _ in range(n)]
    group = [
        SharedPermits(LIMITS, log, settings.limits_topic, f"m{i}-{random.randrange(10**6)}", lease_s=LEASE_S)
        for i, log in enumerate(logs)
    ]
    try:
        for member in group:
            await member.start()
        group[0].lead(1)
        yield group
    finally:
        for member in group:
            await member.close()
        for log in logs:
            log.flush()
            log.close()


def test_three_members_share_five_slots_never_more_in_flight_and_all_proceed(
    limits_deployment: Settings,
) -> None:
    asyncio.run(asyncio.wait_for(share_slots(limits_deployment), 30))


def test_a_rate_split_across_members_stays_within_its_bound_in_every_window(
    limits_deployment: Settings,
) -> None:
    asyncio.run(asyncio.wait_for(share_rate(limits_deployment), 30))


async def share_slots(limits_deployment: Settings) -> None:
    async with members(limits_deployment) as group:
        in_flight = [0]
        most = [0]
        calls: dict[str, int] = {m.worker_id: 0 for m in group}
        stop = asyncio.Event()

        async def keep_calling(member: SharedPermits) -> None:
            rng = random.Random()
            while not stop.is_set():
                held = await member.acquire(SLOT)
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                in_flight[0] -= 1
                calls[member.worker_id] += 1
                held.release()

        tasks = [asyncio.create_task(keep_calling(m)) for m in group for _ in range(4)]
        await asyncio.sleep(4.0)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert most[0] <= 5, most[0]
        assert most[0] == 5, "the limit was never reached: the test proves nothing"
        assert all(n >= 20 for n in calls.values()), calls


async def share_rate(limits_deployment: Settings) -> dict[str, float]:
    rate = 10.0  # a second
    async with members(limits_deployment) as group:
        admitted: list[float] = []
        stop = asyncio.Event()

        async def keep_calling(member: SharedPermits) -> None:
            while not stop.is_set():
                await member.acquire(REQUEST)
                admitted.append(time.monotonic())

        tasks = [asyncio.create_task(keep_calling(m)) for m in group for _ in range(3)]
        started = time.monotonic()
        await asyncio.sleep(6.0)
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ran = time.monotonic() - started

    admitted.sort()
    # Each member's bucket banks at most 1 s of its share and may go one request into debt, and
    # the shares never sum to more than the rate: in any window of T s, at most rate * (T + 1) + 3.
    seen: dict[str, float] = {"admitted": len(admitted), "seconds": ran}
    for window in (1.0, 3.0):
        worst = max(sum(1 for t in admitted if s <= t < s + window) for s in admitted)
        assert worst <= rate * (window + 1.0) + len(group), (window, worst)
        seen[f"worst_{window:g}s"] = worst
    # and the members used the rate, not just stayed under it (shares move by reports and grants)
    assert len(admitted) >= rate * ran * 0.8, (len(admitted), ran)
    return seen
