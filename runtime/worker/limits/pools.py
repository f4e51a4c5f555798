"""One dimension of one limit instance as a pool of capacity with a FIFO queue of waiters.

A rate (requests or tokens a minute) is a token bucket that may go into debt: a take is admitted
while the bucket is not negative and debits its whole amount, so a request's estimated tokens never
have to fit in the bucket at once, and the actual usage reported afterwards debits or credits the
difference. The bucket banks at most ``burst_s`` of its rate, so in any window of ``T`` seconds it
admits at most ``rate * (T + burst_s)`` plus the one take that went into debt. Concurrent calls are
slots. The capacity of either can change while it is used (a worker's share of a deployment's
limit): a cut takes effect for the next take, calls in flight keep their slots.

Waiters are served in arrival order, so a large take is not starved by small ones behind it.
Waiting holds no thread: a waiter is a future, and a bucket's next refill is one timer
(``loop.call_later``), set only while someone waits.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

# A timer set for a refill may fire a hair early (the loop's clock has millisecond resolution): it
# fires this much later than the arithmetic says.
_TIMER_SLACK_S = 0.0005


class Pool:
    """Capacity one dimension of one instance may use here, and who waits for it."""

    def __init__(self, capacity: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.clock = clock
        self.waiters: deque[tuple[asyncio.Future[None], float]] = deque()
        self.waiting_amount = 0.0  # the sum of the queued amounts (what this worker wants beyond)
        self.ceiling = capacity  # the most one take may ask (a limit's whole capacity); set by the owner

    # -- what a subclass defines
    def admits(self, amount: float, now: float) -> bool:
        """Whether a take may be granted now (whatever its size: buckets go into debt)."""
        raise NotImplementedError

    def take(self, amount: float, now: float) -> None:
        raise NotImplementedError

    def give_back(self, amount: float) -> None:
        """Undo a take (a cancelled acquire, a release, a credit)."""
        raise NotImplementedError

    def wait_s(self, now: float) -> float | None:
        """How long until ``admits`` turns true by itself (a refill), or None if only a give-back can."""
        raise NotImplementedError

    def set_capacity(self, capacity: float, now: float) -> None:
        raise NotImplementedError

    # -- the queue
    def try_take(self, amount: float) -> bool:
        """Take at once if nobody is queued ahead and the pool admits; False means: queue."""
        if self.waiters:
            return False
        now = self.clock()
        if not self.admits(amount, now):
            return False
        self.take(amount, now)
        return True

    def enqueue(self, amount: float) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((future, amount))
        self.waiting_amount += amount
        self.pump()
        return future

    def withdraw(self, future: asyncio.Future[None], amount: float) -> None:
        """A queued waiter gave up (cancelled): it leaves the queue; whoever was behind it may go."""
        for i, (queued, _) in enumerate(self.waiters):
            if queued is future:
                del self.waiters[i]
                self.waiting_amount -= amount
                break
        self.pump()

    def pump(self) -> None:
        """Grant queued takes in order while the pool admits; then, if a refill will admit the
        head, wake up when it does."""
        while self.waiters:
            future, amount = self.waiters[0]
            if future.done():  # cancelled; its task withdraws it too, harmlessly
                self.waiters.popleft()
                self.waiting_amount -= amount
                continue
            now = self.clock()
            if not self.admits(amount, now):
                delay = self.wait_s(now)
                if delay is not None:
                    self._wake_in(delay)
                return
            self.waiters.popleft()
            self.waiting_amount -= amount
            self.take(amount, now)
            future.set_result(None)

    def _wake_in(self, delay: float) -> None:
        """Overridden by buckets (slots are woken by give-backs, never by time)."""


class Bucket(Pool):
    """A rate as a token bucket in units a second, allowed into debt by the take that empties it."""

    def __init__(
        self, per_minute: float, burst_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(per_minute, clock)
        self.burst_s = burst_s
        self.rate = per_minute / 60.0
        self.level = self.rate * burst_s  # a fresh bucket holds one burst
        self.stamp = clock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self.taken = 0.0  # all debits net of credits: what was used (the rate a worker reports)

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.rate * self.burst_s, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def admits(self, amount: float, now: float) -> bool:
        self._refill(now)
        return self.level >= 0.0 and self.rate > 0.0

    def try_take(self, amount: float) -> bool:
        # ``Pool.try_take`` inlined: the path of every call under a limit nowhere near
        if self.waiters or self.rate <= 0.0:
            return False
        now = self.clock()
        if now > self.stamp:
            self.level = min(self.rate * self.burst_s, self.level + (now - self.stamp) * self.rate)
            self.stamp = now
        if self.level < 0.0:
            return False
        self.level -= amount
        self.taken += amount
        return True

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount
        self.taken += amount

    def give_back(self, amount: float) -> None:
        self._refill(self.clock())
        self.level = min(self.rate * self.burst_s, self.level + amount)
        self.taken -= amount
        self.pump()

    def debit(self, amount: float) -> None:
        """Usage beyond an estimate: the bucket goes (further) into debt."""
        self._refill(self.clock())
        self.level -= amount
        self.taken += amount

    def wait_s(self, now: float) -> float | None:
        if self.rate <= 0.0:
            return None  # no share at all: only a new capacity wakes the queue
        return -self.level / self.rate

    def set_capacity(self, capacity: float, now: float) -> None:
        self._refill(now)
        self.capacity = capacity
        self.rate = capacity / 60.0
        self.level = min(self.level, self.rate * self.burst_s)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pump()

    def _wake_in(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + delay + _TIMER_SLACK_S
        if self._timer is not None and self._timer_at <= at:
            return  # already woken no later than that
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.pump()


class Slots(Pool):
    """Concurrent calls: ``capacity`` slots, each held from the take to its release."""

    def __init__(self, capacity: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(capacity, clock)
        self.in_use = 0.0

    def admits(self, amount: float, now: float) -> bool:
        return self.in_use + amount <= self.capacity

    def try_take(self, amount: float) -> bool:
        if self.waiters or self.in_use + amount > self.capacity:
            return False
        self.in_use += amount
        return True

    def take(self, amount: float, now: float) -> None:
        self.in_use += amount

    def give_back(self, amount: float) -> None:
        self.in_use -= amount
        self.pump()

    def wait_s(self, now: float) -> float | None:
        return None

    def set_capacity(self, capacity: float, now: float) -> None:
        self.capacity = capacity
        self.pump()
