"""LocalPermits and its pools: token buckets on a fake clock, slots, FIFO order, cancellation,
needs no wait can meet, and the fast path's cost."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.worker.limits.local import LocalPermits
from runtime.worker.limits.permits import LimitUnsatisfiable, Need
from runtime.worker.limits.pools import Bucket, Slots
from runtime.workflow.limits import Limit

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def req(limit: str = "api", key: str | None = None, amount: float = 1.0) -> Need:
    return Need(limit, key, "requests_per_minute", amount)


def tokens(amount: float, limit: str = "api") -> Need:
    return Need(limit, None, "tokens_per_minute", amount)


def slot(limit: str = "pay", key: str | None = None) -> Need:
    return Need(limit, key, "concurrent", 1)


# ---------------------------------------------------------------------------------------- buckets
def test_bucket_admits_a_burst_then_paces_at_its_rate() -> None:
    clock = FakeClock()
    bucket = Bucket(60.0, burst_s=1.0, clock=clock)  # 1 a second, 1 s of burst
    assert bucket.try_take(1)  # the burst
    assert bucket.try_take(1)  # level 0 is not negative: admitted, into debt
    assert not bucket.try_take(1)
    assert bucket.wait_s(clock.now) == pytest.approx(1.0)
    clock.now += 0.5
    assert not bucket.try_take(1)
    clock.now += 0.5
    assert bucket.try_take(1)


def test_bucket_never_admits_more_than_rate_times_window_plus_burst_plus_one() -> None:
    clock = FakeClock()
    bucket = Bucket(600.0, burst_s=1.0, clock=clock)  # 10 a second
    admitted: list[float] = []
    for _ in range(60_000):  # a caller trying every millisecond for 60 s
        if bucket.try_take(1):
            admitted.append(clock.now)
        clock.now += 0.001
    start = admitted[0]
    for window in (1.0, 5.0, 30.0):
        # every window of this length, slid over the admissions
        worst = max(
            sum(1 for t in admitted if s <= t < s + window) for s in admitted[:: max(1, len(admitted) // 200)]
        )
        assert worst <= 10 * (window + 1.0) + 1, (window, worst)
    assert admitted[-1] - start > 59  # and it did keep admitting all along
    assert len(admitted) >= 600 - 1


def test_tokens_go_into_debt_and_a_correction_settles_it() -> None:
    clock = FakeClock()
    bucket = Bucket(6000.0, burst_s=1.0, clock=clock)  # 100 tokens a second
    assert bucket.try_take(500)  # more than the bucket holds: admitted, into debt
    assert bucket.level == pytest.approx(-400)
    assert not bucket.try_take(1)
    bucket.give_back(300)  # the call used 200, not 500
    assert bucket.level == pytest.approx(-100)
    clock.now += 1.0
    assert bucket.try_take(1)


def test_a_cut_applies_to_the_next_take() -> None:
    clock = FakeClock()
    bucket = Bucket(600.0, clock=clock)
    bucket.set_capacity(0.0, clock.now)
    assert not bucket.try_take(1)
    assert bucket.wait_s(clock.now) is None  # no share: only a new capacity wakes it
    slots = Slots(3)
    assert slots.try_take(1) and slots.try_take(1)
    slots.set_capacity(1, clock.now)
    assert not slots.try_take(1)
    slots.give_back(1)
    assert not slots.try_take(1)
    slots.give_back(1)
    assert slots.try_take(1)


# ---------------------------------------------------------------------------------------- permits
LIMITS = {
    "api": Limit("api", models=("m",), requests_per_minute=600, tokens_per_minute=60_000),
    "pay": Limit("pay", tools=("charge",), concurrent=2, per="tenant"),
}


async def test_slots_bound_concurrency_and_waiters_go_in_arrival_order() -> None:
    permits = LocalPermits(LIMITS)
    a = await permits.acquire([slot()])
    b = await permits.acquire([slot()])
    assert permits.blocking([slot()]) == slot()
    order: list[int] = []

    async def call(i: int) -> None:
        held = await permits.acquire([slot()])
        order.append(i)
        await asyncio.sleep(0)
        held.release()

    tasks = [asyncio.create_task(call(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert order == []
    a.release()
    a.release()  # idempotent: gives back one slot, not two
    b.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert permits.pools[("pay", "concurrent")].in_use == 0  # type: ignore[attr-defined]


async def test_keyed_instances_are_separate() -> None:
    permits = LocalPermits(LIMITS)
    await permits.acquire([slot(key="a")])
    await permits.acquire([slot(key="a")])
    assert permits.blocking([slot(key="a")]) is not None
    assert permits.blocking([slot(key="b")]) is None
    await asyncio.wait_for(permits.acquire([slot(key="b")]), 1)


async def test_a_rate_wait_is_woken_by_a_timer_not_by_polling() -> None:
    permits = LocalPermits({"api": Limit("api", models=("m",), requests_per_minute=600)})  # 10/s
    for _ in range(11):
        await permits.acquire([req()])  # the burst of 10 and one into debt
    started = time.monotonic()
    await permits.acquire([req()])
    waited = time.monotonic() - started
    assert 0.09 <= waited < 0.3, waited


async def test_a_cancelled_wait_takes_nothing() -> None:
    permits = LocalPermits(LIMITS)
    first = await permits.acquire([slot(), req()])
    await permits.acquire([slot()])
    waiting = asyncio.create_task(permits.acquire([req(), slot()]))
    await asyncio.sleep(0.01)
    pool = permits.pools[("pay", "concurrent")]
    assert len(pool.waiters) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(pool.waiters) == 0 and pool.waiting_amount == 0
    first.release()
    # the cancelled call neither holds the freed slot nor debited a request
    assert permits.blocking([slot()]) is None
    third = await asyncio.wait_for(permits.acquire([slot()]), 1)
    third.release()
    bucket = permits.pools[("api", "requests_per_minute")]
    assert bucket.taken == 1  # type: ignore[attr-defined]


async def test_cancelled_in_the_turn_it_was_granted_gives_the_grant_back() -> None:
    permits = LocalPermits(LIMITS)
    held = await permits.acquire([slot()])
    await permits.acquire([slot()])
    waiting = asyncio.create_task(permits.acquire([slot()]))
    await asyncio.sleep(0.01)
    held.release()  # grants the waiter's future...
    waiting.cancel()  # ...and the task is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert permits.pools[("pay", "concurrent")].in_use == 1  # type: ignore[attr-defined]


async def test_a_cancelled_head_lets_the_next_waiter_go() -> None:
    permits = LocalPermits(LIMITS)
    held = await permits.acquire([slot()])
    await permits.acquire([slot()])
    head = asyncio.create_task(permits.acquire([slot()]))
    await asyncio.sleep(0)
    behind = asyncio.create_task(permits.acquire([slot()]))
    await asyncio.sleep(0.01)
    held.release()
    head.cancel()
    await asyncio.wait_for(behind, 1)


async def test_needs_no_wait_can_meet_are_refused_naming_the_limit() -> None:
    permits = LocalPermits(LIMITS)
    with pytest.raises(LimitUnsatisfiable, match="api tokens/min"):
        await permits.acquire([req(), tokens(60_001)])
    # nothing was kept from the request need taken before the refusal
    assert permits.pools[("api", "requests_per_minute")].taken == 0  # type: ignore[attr-defined]
    with pytest.raises(LookupError, match="'nope'"):
        await permits.acquire([req("nope")])


async def test_correct_debits_and_credits_the_tokens_used() -> None:
    permits = LocalPermits(LIMITS)
    held = await permits.acquire([req(), tokens(1000)])
    held.correct("tokens_per_minute", 4000)
    bucket = permits.pools[("api", "tokens_per_minute")]
    assert bucket.taken == 4000  # type: ignore[attr-defined]
    held.correct("tokens_per_minute", 500)
    assert bucket.taken == 500  # type: ignore[attr-defined]


async def test_two_calls_needing_the_same_slots_in_opposite_orders_do_not_deadlock() -> None:
    limits = {n: Limit(n, tools=("t",), concurrent=1) for n in ("x", "y")}
    permits = LocalPermits(limits)

    async def call(first: str, second: str) -> None:
        for _ in range(50):
            held = await permits.acquire(
                [Need(first, None, "concurrent", 1), Need(second, None, "concurrent", 1)]
            )
            await asyncio.sleep(0)
            held.release()

    await asyncio.wait_for(asyncio.gather(call("x", "y"), call("y", "x")), 5)


def test_an_acquire_that_needs_no_wait_never_suspends() -> None:
    """The fast path costs no loop turn: the acquire's coroutine finishes at its first step (a
    timing assertion would flake on a shared machine; how fast it is belongs to bench/limits_far.py)."""
    far = {
        "api": Limit("api", models=("m",), requests_per_minute=1e9, tokens_per_minute=1e12, concurrent=10**6)
    }
    permits = LocalPermits(far)
    needs = [req(), tokens(500), Need("api", None, "concurrent", 1)]
    for _ in range(1_000):
        acquiring = permits.acquire(needs)
        with pytest.raises(StopIteration) as done:
            acquiring.send(None)
        held = done.value.value
        held.correct("tokens_per_minute", 400)
        held.release()
    assert permits.pools[("api", "concurrent")].in_use == 0  # type: ignore[attr-defined]
