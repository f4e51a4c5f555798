"""SharedPermits over the in-memory log, three members in one loop: a shared concurrency limit is
never exceeded and everyone proceeds; a crashed member's share returns after its lease; the
coordinator moves; a stale coordinator's grant is ignored."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.worker.limits.messages import Grant, encode
from runtime.worker.limits.permits import Need
from runtime.worker.limits.shared import MARGIN_FRACTION, SharedPermits
from runtime.workflow.limits import Limit
from support.wait import until

pytestmark = pytest.mark.unit

TOPIC = "limits"
PAY = {"pay": Limit("pay", tools=("charge",), concurrent=5)}
SLOT = [Need("pay", None, "concurrent", 1)]


@asynccontextmanager
async def members(n: int, lease_s: float = 1.5) -> AsyncIterator[tuple[MemoryLog, list[SharedPermits]]]:
    log = MemoryLog(Settings(partitions=1))
    group = [SharedPermits(PAY, log, TOPIC, f"w{i}", lease_s=lease_s) for i in range(n)]
    for member in group:
        await member.start()
    try:
        yield log, group
    finally:
        for member in group:
            await member.close()


class InFlight:
    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.calls: dict[str, int] = {}

    async def call(self, member: SharedPermits, hold_s: float) -> None:
        held = await member.acquire(SLOT)
        try:
            self.now += 1
            self.most = max(self.most, self.now)
            await asyncio.sleep(hold_s)
        finally:
            self.now -= 1
            self.calls[member.worker_id] = self.calls.get(member.worker_id, 0) + 1
            held.release()

    async def keep_calling(self, member: SharedPermits, stop: asyncio.Event) -> None:
        rng = random.Random(member.worker_id)
        while not stop.is_set():
            await self.call(member, rng.uniform(0.001, 0.01))


async def run_for(seconds: float, flight: InFlight, group: list[SharedPermits], per_member: int = 6) -> None:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(flight.keep_calling(m, stop)) for m in group for _ in range(per_member)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)


async def test_three_members_never_exceed_the_shared_concurrency_and_all_proceed() -> None:
    async with members(3) as (_, group):
        group[0].lead(1)
        flight = InFlight()
        await run_for(2.0, flight, group)
        assert flight.most <= 5
        assert flight.most >= 4, "the limit was never approached: the test proves nothing"
        assert all(flight.calls.get(m.worker_id, 0) >= 20 for m in group), flight.calls


async def test_a_crashed_member_s_share_returns_after_its_lease() -> None:
    lease_s = 1.0
    async with members(3, lease_s) as (_, group):
        group[0].lead(1)
        crashed = group[2]
        # the member that will crash asks for every slot while the others are idle, and keeps them
        asking = [asyncio.create_task(crashed.acquire(SLOT)) for _ in range(5)]
        await until(lambda: sum(t.done() for t in asking) >= 4, 5, "w2 to hold most slots")
        for task in asking:
            task.cancel()
        await asyncio.gather(*asking, return_exceptions=True)
        kept = [t.result() for t in asking if not t.cancelled()]
        # it crashes: no more reports, no leaving message, its calls never release
        assert crashed._ticker is not None
        crashed._ticker.cancel()
        crashed._stop.set()
        crashed.log = MemoryLog(Settings(partitions=1))  # what it would still send goes nowhere
        killed_at = time.monotonic()

        flight = InFlight()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(flight.keep_calling(m, stop)) for m in group[:2] for _ in range(6)]
        most_before_lease = 0
        while time.monotonic() < killed_at + lease_s * 0.9:
            most_before_lease = max(most_before_lease, flight.now)
            await asyncio.sleep(0.005)
        await until(
            lambda: flight.now == 5, lease_s * (1 + MARGIN_FRACTION) + 2, "all 5 slots used by the others"
        )
        returned_after = time.monotonic() - killed_at
        stop.set()
        await asyncio.gather(*tasks)
        assert len(kept) >= 4
        assert most_before_lease <= 5 - len(kept), (most_before_lease, len(kept))
        assert returned_after <= lease_s * (1 + MARGIN_FRACTION) + 1.0, returned_after
        group.remove(crashed)
        crashed._stop.set()


async def test_the_coordinator_moves_and_a_stale_one_is_ignored() -> None:
    async with members(3) as (log, group):
        group[0].lead(1)
        flight = InFlight()
        await run_for(0.5, flight, group)
        group[0].step_down()
        group[1].lead(2)
        await until(
            lambda: group[2].applied is not None and group[2].applied[0] == 2, 5, "a grant of epoch 2"
        )
        before = dict(flight.calls)
        await run_for(1.0, flight, group)
        assert flight.most <= 5
        assert all(flight.calls[m.worker_id] > before.get(m.worker_id, 0) for m in group), flight.calls
        # the old coordinator, unaware, grants w2 everything: nobody who has seen epoch 2 applies it
        stale = Grant(epoch=1, seq=999, lease_s=60, shares={"w2": [("pay", "concurrent", 5.0)]})
        log.append(TOPIC, 0, b"w0", encode(stale)).result()
        await asyncio.sleep(0.2)
        assert group[2].applied is not None and group[2].applied[0] == 2
        assert group[2].granted.get(("pay", "concurrent"), 0.0) < 5


async def test_a_keyed_instance_unused_for_a_while_is_forgotten_and_asks_again_when_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.worker.limits import shared

    monkeypatch.setattr(shared, "_IDLE_TICKS", 2)
    log = MemoryLog(Settings(partitions=1))
    keyed = {"pay": Limit("pay", tools=("charge",), concurrent=2, per="tenant")}
    member = SharedPermits(keyed, log, TOPIC, "w0", lease_s=0.6)
    await member.start()
    try:
        member.lead(1)
        need = [Need("pay", "acme", "concurrent", 1)]
        held = await asyncio.wait_for(member.acquire(need), 5)
        held.release()
        key = ("pay[acme]", "concurrent")
        await until(lambda: key not in member.local.pools, 5, "the idle tenant's pool to be forgotten")
        assert key not in member.granted
        await until(
            lambda: all(key not in {(i, d) for i, d, _ in g} for g in last_grant(log).values()), 5, ""
        )
        again = await asyncio.wait_for(member.acquire(need), 5)  # a new share, granted anew
        again.release()
    finally:
        await member.close()


def last_grant(log: MemoryLog) -> dict[str, list[tuple[str, str, float]]]:
    from runtime.worker.limits.messages import decode

    grants = [m for r in log.records(TOPIC, 0) if isinstance(m := decode(r.value or b""), Grant)]
    return {w: [(i, d, v) for i, d, v in entries] for w, entries in grants[-1].shares.items()}


async def test_a_crashed_coordinator_s_leases_are_respected_by_the_next() -> None:
    lease_s = 1.0
    async with members(3, lease_s) as (_, group):
        coordinator = group[0]
        coordinator.lead(1)
        await run_for(0.5, InFlight(), group)
        # the coordinator crashes holding two slots: it neither reports nor grants again
        kept = [await asyncio.wait_for(coordinator.acquire(SLOT), 5) for _ in range(2)]
        assert coordinator._ticker is not None
        coordinator._ticker.cancel()
        coordinator._stop.set()
        coordinator.epoch = None
        coordinator.log = MemoryLog(Settings(partitions=1))
        crashed_at = time.monotonic()
        group[1].lead(2)
        others = InFlight()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(others.keep_calling(m, stop)) for m in group[1:] for _ in range(6)]
        most_within_lease = 0
        while time.monotonic() < crashed_at + lease_s * 0.9:
            most_within_lease = max(most_within_lease, others.now)
            await asyncio.sleep(0.002)
        # the new coordinator knew the old one's leases: its two slots stayed counted until they ran out
        assert most_within_lease <= 5 - len(kept), most_within_lease
        assert all(others.calls.get(m.worker_id, 0) > 0 for m in group[1:]), others.calls
        await until(lambda: others.now == 5, lease_s * 2 + 2, "the crashed coordinator's slots to return")
        stop.set()
        await asyncio.gather(*tasks)
        assert others.most <= 5
