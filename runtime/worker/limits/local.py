"""Permits held in one process: every limit whole (in-memory and local runs), or a worker's share.

Each limit instance (a limit's name, or name[key] for a keyed limit; created on first use) has a
pool per declared dimension (``runtime.worker.limits.pools``). ``acquire`` takes a call's needs in
one fixed order -- slots before rates, each by instance -- so two calls never hold slots the other
waits for, and a rate is debited just before the call goes out rather than while it still waits
for a slot. A need nobody queues for and the pool admits costs a dict lookup and a comparison.

``SharedPermits`` (runtime.worker.limits.shared) drives the same class with ``initial`` set to no
capacity and changes each pool's capacity to the share the deployment's coordinator grants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from runtime.worker.limits.permits import LimitUnsatisfiable, Need
from runtime.workflow.limits import Dimension, Limit

from .pools import Bucket, Pool, Slots

PoolKey = tuple[str, Dimension]  # (instance, dimension)


def acquiring_order(need: Need) -> tuple[bool, str, Dimension]:
    """Slots before rates, each by instance: the one order every acquire takes needs in."""
    return (need.dimension != "concurrent", need.instance, need.dimension)


class LocalHeld:
    """What one attempt took: slots go back at ``release``, rate debits are corrected, never returned."""

    __slots__ = ("_released", "_slots", "_taken")

    def __init__(self, taken: list[tuple[Pool, float, Dimension]], slots: list[tuple[Slots, float]]) -> None:
        self._taken = taken
        self._slots = slots
        self._released = False

    def correct(self, dimension: Dimension, actual: float) -> None:
        for i, (pool, estimate, taken_dimension) in enumerate(self._taken):
            if taken_dimension != dimension or not isinstance(pool, Bucket):
                continue
            if actual > estimate:
                pool.debit(actual - estimate)
            elif actual < estimate:
                pool.give_back(estimate - actual)
            self._taken[i] = (pool, actual, taken_dimension)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        for pool, amount in self._slots:
            pool.give_back(amount)


_NOTHING = LocalHeld([], [])


class LocalPermits:
    """Permits of ``limits`` held by this process alone (``Permits``)."""

    def __init__(
        self,
        limits: Mapping[str, Limit],
        *,
        burst_s: float = 1.0,
        initial: Callable[[Limit, Dimension], float] | None = None,
        on_open: Callable[[PoolKey, Need, Pool], None] | None = None,
        on_queue: Callable[[PoolKey, Pool], None] | None = None,
    ) -> None:
        """``initial`` gives a new pool's capacity (default: the limit's own); ``on_open`` hears of
        each instance's pool as it is first used, ``on_queue`` of each need that has to wait."""
        self.limits = dict(limits)
        self.burst_s = burst_s
        self.pools: dict[PoolKey, Pool] = {}
        self._initial = initial
        self._on_open = on_open
        self._on_queue = on_queue

    async def acquire(self, needs: Sequence[Need]) -> LocalHeld:
        if not needs:
            return _NOTHING
        ordered = sorted(needs, key=acquiring_order) if len(needs) > 1 else needs
        taken: list[tuple[Pool, float, Dimension]] = []
        slots: list[tuple[Slots, float]] = []
        try:
            for need in ordered:
                key = (need.instance, need.dimension)
                pool = self.pools.get(key) or self.open_pool(key, need)
                amount = need.amount
                if amount > pool.ceiling:
                    raise LimitUnsatisfiable(
                        f"a call needs {amount:g} of {need.describe()} but the limit allows "
                        f"{pool.ceiling:g}: no wait can meet it"
                    )
                if not pool.try_take(amount):
                    await self._wait(key, pool, amount)
                taken.append((pool, amount, need.dimension))
                if isinstance(pool, Slots):
                    slots.append((pool, amount))
        except BaseException:
            for pool, amount, _ in reversed(taken):  # a failed or cancelled acquire keeps nothing
                pool.give_back(amount)
            raise
        return LocalHeld(taken, slots)

    def try_acquire(self, needs: Sequence[Need]) -> LocalHeld | None:
        pools = self.pools
        taken: list[tuple[Pool, float, Dimension]] = []
        slots: list[tuple[Slots, float]] = []
        for need in needs:
            pool = pools.get(need.pool_key)
            amount = need.amount
            # a pool not opened yet, or a need no wait can meet: the slow path opens it, or says so
            if pool is None or amount > pool.ceiling or not pool.try_take(amount):
                for taken_pool, taken_amount, _ in reversed(taken):
                    taken_pool.give_back(taken_amount)
                return None
            taken.append((pool, amount, need.dimension))
            if isinstance(pool, Slots):
                slots.append((pool, amount))
        return LocalHeld(taken, slots)

    async def _wait(self, key: PoolKey, pool: Pool, amount: float) -> None:
        future = pool.enqueue(amount)
        if future.done():
            return
        if self._on_queue is not None:
            self._on_queue(key, pool)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                pool.give_back(amount)  # granted in the same turn the wait was cancelled
            else:
                pool.withdraw(future, amount)
            raise

    def blocking(self, needs: Sequence[Need]) -> Need | None:
        for need in sorted(needs, key=acquiring_order):
            key = (need.instance, need.dimension)
            pool = self.pools.get(key)
            if pool is None:
                if self._initial is None:
                    continue  # a new pool of the whole limit admits its first call
                pool = self.open_pool(key, need)
            if pool.waiters or not pool.admits(need.amount, pool.clock()):
                return need
        return None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def open_pool(self, key: PoolKey, need: Need) -> Pool:
        limit = self.limits.get(need.limit)
        if limit is None:
            raise LookupError(f"no limit named {need.limit!r} is declared (declared: {sorted(self.limits)})")
        ceiling = limit.capacity(need.dimension)
        if ceiling is None:
            raise LookupError(f"limit {need.limit!r} declares no {need.dimension}")
        capacity = ceiling if self._initial is None else self._initial(limit, need.dimension)
        pool: Pool = Slots(capacity) if need.dimension == "concurrent" else Bucket(capacity, self.burst_s)
        pool.ceiling = ceiling
        self.pools[key] = pool
        if self._on_open is not None:
            self._on_open(key, need, pool)
        return pool
