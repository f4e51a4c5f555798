"""Permits shared by every worker of a deployment: leases granted over the limits topic.

Each worker holds a share of every limit instance it uses, in a ``LocalPermits`` whose pools start
empty: its calls wait only when its own share is used up, never on a round trip per call. Every
worker reports on the limits topic what it wants and holds (every third of a lease, and at once when
calls start to wait, a cut is applied or a new instance is used); the coordinator -- the worker
that owns partition 0 of the events topic, told so by the Worker's assignment hooks -- divides each
capacity max-min fairly (``allocation``) and sends every worker's share in one grant, stamped with
partition 0's epoch. A grant is a lease: a worker stops using it ``lease_s`` after reading it
unless a newer grant renews it, and the coordinator counts it as used until ``lease_s`` and a margin
after sending it, or until the worker reports having applied something newer (``ledger``). So a
worker killed while holding permits costs the others at most a lease and its margin.

A worker whose share exceeds its want while another waits on the same instance gives the excess
up on its own and says so, so the freed capacity moves in one report and one grant.

Every worker reads the whole topic (from what its short retention keeps), so a worker that becomes
coordinator already knows the leases outstanding; it grants nothing before it has read up to the
topic's end as of taking over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from runtime.log.port.protocol import EventLog, LogRecord, Tail
from runtime.worker.limits.permits import Need
from runtime.workflow.limits import Dimension, Limit

from .allocation import fair_targets, grants
from .ledger import Key, Ledger
from .local import LocalHeld, LocalPermits
from .messages import Grant, Item, Report, decode, encode
from .pools import Bucket, Pool, Slots

if TYPE_CHECKING:
    from concurrent.futures import Future

log = logging.getLogger("agentlog.limits")

# The coordinator counts a grant as used this fraction of a lease longer than the worker uses it:
# room for the time between its send and its reading.
MARGIN_FRACTION = 0.2
# A rate's want, when no call waits for it: its recent use and this much room to grow.
_HEADROOM = 1.25
# A keyed instance's pool is forgotten after this many reports (thirds of a lease) without use.
_IDLE_TICKS = 30


class SharedHeld:
    """A ``LocalHeld`` that, on release, lets a worker others wait on give up what it no longer needs."""

    __slots__ = ("_inner", "_owner")

    def __init__(self, inner: LocalHeld, owner: SharedPermits) -> None:
        self._inner = inner
        self._owner = owner

    def correct(self, dimension: Dimension, actual: float) -> None:
        self._inner.correct(dimension, actual)

    def release(self) -> None:
        self._inner.release()
        if self._owner.others_waiting:
            self._owner.poke()


class SharedPermits:
    """The deployment's limits as this worker may use them (``Permits``), over ``topic``."""

    def __init__(
        self,
        limits: Mapping[str, Limit],
        log: EventLog,
        topic: str,
        worker_id: str,
        *,
        lease_s: float,
        burst_s: float = 1.0,
    ) -> None:
        self.limits = dict(limits)
        self.log = log
        self.topic = topic
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.renew_s = lease_s / 3
        self.local = LocalPermits(
            limits, burst_s=burst_s, initial=lambda _l, _d: 0.0, on_open=self._opened, on_queue=self._queued
        )
        self.ledger = Ledger(lease_s, lease_s * MARGIN_FRACTION)
        self.meta: dict[Key, str] = {}  # instance dimension -> its limit's name
        self.granted: dict[Key, float] = {}  # the shares of the last grant applied
        self.applied: tuple[int, int] | None = None
        self.lease_until = 0.0
        self.given_up: dict[Key, float] = {}  # shares given up to waiting workers, until the next grant
        self._reported_at = -math.inf  # when the last report the log acknowledged was sent
        # instances another worker waits on (from their reports): where a spare share is given up
        self.others_waiting: dict[Key, set[str]] = {}
        self._use: dict[
            Key, tuple[float, float]
        ] = {}  # a bucket's (taken, per-minute rate) at the last report
        self._last_sent: dict[Key, tuple[float, bool]] = {}  # (holds, waiting) as last reported
        self._idle: dict[Key, int] = {}  # reports since a keyed instance was last used
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poked = False
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._lease_timer: asyncio.TimerHandle | None = None
        # coordinating: partition 0's epoch, the offset to read before granting, and grant numbers
        self.epoch: int | None = None
        self._pending_lead: tuple[int, int] | None = None
        self._catch_up_to = 0
        self._read_to = 0
        self._seq = 0
        self._allocating = False
        self._last_grant: tuple[float, dict[str, list[tuple[str, Dimension, float]]]] | None = None
        self._served: dict[Key, dict[str, int]] = {}
        self._serial = 0

    # ------------------------------------------------------------------------------ Permits
    async def acquire(self, needs: Sequence[Need]) -> SharedHeld:
        return SharedHeld(await self.local.acquire(needs), self)

    def try_acquire(self, needs: Sequence[Need]) -> SharedHeld | None:
        inner = self.local.try_acquire(needs)
        return None if inner is None else SharedHeld(inner, self)

    def blocking(self, needs: Sequence[Need]) -> Need | None:
        return self.local.blocking(needs)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        low, _ = await asyncio.to_thread(self.log.watermarks, self.topic, 0)
        self._read_to = low
        tail = self.log.tail(self.topic)
        tail.follow(0, low)
        self._reader = threading.Thread(target=self._read, args=(tail,), name="agentlog-limits", daemon=True)
        self._reader.start()
        for limit in self.limits.values():
            if limit.per is None:  # known before any call: reported from the start, so shares are ready
                for dimension in limit.dimensions():
                    self.local.open_pool((limit.name, dimension), Need(limit.name, None, dimension, 0))
        self._ticker = asyncio.create_task(self._tick())
        if self._pending_lead is not None:
            self._lead(*self._pending_lead)
            self._pending_lead = None

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self._lease_timer is not None:
            self._lease_timer.cancel()
        self.epoch = None
        # what it held goes back to the others now, not a lease later
        self._send(Report(worker=self.worker_id, applied=self.applied, leaving=True))
        self._stop.set()
        if self._reader is not None:
            await asyncio.to_thread(self._reader.join, 5)

    # ------------------------------------------------------------------------------ coordinator hooks
    def lead(self, epoch: int) -> None:
        """This worker now owns partition 0 at ``epoch`` (any thread): it coordinates once it has read
        the limits topic as far as it reaches now."""
        _, high = self.log.watermarks(self.topic, 0)
        loop = self._loop
        if loop is None:
            self._pending_lead = (epoch, high)  # before start(): it leads once started
        else:
            loop.call_soon_threadsafe(self._lead, epoch, high)

    def step_down(self) -> None:
        """This worker lost partition 0 (any thread): it grants nothing more."""
        self._pending_lead = None
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._step_down)

    def _lead(self, epoch: int, high: int) -> None:
        if epoch < self.ledger.newest_epoch:
            return  # a newer coordinator already spoke
        self.epoch = epoch
        self._seq = 0
        self._catch_up_to = high
        self._last_grant = None
        self._schedule_allocation()

    def _step_down(self) -> None:
        self.epoch = None

    # ------------------------------------------------------------------------------ reading the topic
    def _read(self, tail: Tail) -> None:
        """The reader's thread: hands what it reads to the loop."""
        try:
            while not self._stop.is_set():
                records = tail.poll(0.1)
                if records and self._loop is not None:
                    self._loop.call_soon_threadsafe(self._on_records, [r for _, r in records])
        finally:
            tail.close()

    def _on_records(self, records: list[LogRecord]) -> None:
        now = time.monotonic()
        wall_ms = time.time() * 1000
        for record in records:
            self._read_to = record.offset + 1
            if record.value is None:
                continue
            try:
                message = decode(record.value)
            except ValidationError:
                log.warning("limits topic: offset %d is not a message this version reads", record.offset)
                continue
            # a record read while catching up counts from when it was written, not from now
            at = now - max(0.0, (wall_ms - record.timestamp_ms) / 1000) if record.timestamp_ms else now
            if isinstance(message, Grant):
                self._on_grant(message, at)
            else:
                self._on_report(message, at)
        if self.epoch is not None:
            self._schedule_allocation()

    def _on_grant(self, grant: Grant, at: float) -> None:
        if self.epoch is not None and grant.epoch > self.epoch:
            self.epoch = None  # a newer coordinator: this one stops
        stale = grant.epoch < self.ledger.newest_epoch
        self.ledger.add_grant(grant, at)
        if stale or (self.applied is not None and grant.order() <= self.applied):
            return
        until = at + min(self.lease_s, grant.lease_s)
        if until <= time.monotonic():
            return  # its lease ran out before it was read
        self._apply(grant, until)

    def _on_report(self, report: Report, at: float) -> None:
        self.ledger.add_report(report, at)
        if report.worker == self.worker_id:
            return
        newly = False
        for waiting in self.others_waiting.values():
            waiting.discard(report.worker)
        if not report.leaving:
            for item in report.items:
                if item.q:
                    key = (item.i, item.d)
                    newly = newly or key in self.local.pools
                    self.others_waiting.setdefault(key, set()).add(report.worker)
        self.others_waiting = {k: v for k, v in self.others_waiting.items() if v}
        if newly:
            self.poke()  # what this worker holds of it and does not need goes back now

    # ------------------------------------------------------------------------------ this worker's shares
    # A share is used until the earlier of: a lease after its grant was read, and a lease after the
    # last report of this worker the log acknowledged. The coordinator frees a worker's shares a
    # lease and a margin after the last report of it that it read; so a worker that can no longer
    # report (killed, or cut off from Kafka) stops using its shares before anyone else gets them.
    def _apply(self, grant: Grant, until: float) -> None:
        self.applied = grant.order()
        self.granted = {(i, d): v for i, d, v in grant.shares.get(self.worker_id, [])}
        self.given_up = {}
        self.lease_until = until
        self._refresh()
        self.poke()  # a cut is confirmed at once

    def _deadline(self) -> float:
        return min(self.lease_until, self._reported_at + self.lease_s)

    def _refresh(self) -> None:
        """Set every pool to its share (or nothing, once the deadline passed); wake at the deadline."""
        now = time.monotonic()
        live = now < self._deadline()
        for key, pool in self.local.pools.items():
            share = min(self.granted.get(key, 0.0), self.given_up.get(key, math.inf)) if live else 0.0
            if share != pool.capacity:
                pool.set_capacity(share, now)
        if self._lease_timer is not None:
            self._lease_timer.cancel()
            self._lease_timer = None
        if live and self._loop is not None:
            self._lease_timer = self._loop.call_later(self._deadline() - now, self._lease_ran_out)

    def _lease_ran_out(self) -> None:
        self._lease_timer = None
        if time.monotonic() >= self._deadline() and self.granted:
            log.warning(
                "limits: this worker's shares were not renewed in %.1f s; it waits for new ones", self.lease_s
            )
            self.granted = {}
        self._refresh()
        self.poke()

    def _report_acked(self, sent_at: float) -> None:
        was_live = time.monotonic() < self._deadline()
        self._reported_at = max(self._reported_at, sent_at)
        if not was_live:  # else the deadline only moved later: the timer rearms when it fires
            self._refresh()

    def _opened(self, key: Key, need: Need, pool: Pool) -> None:
        self.meta[key] = need.limit
        if time.monotonic() < self._deadline() and key in self.granted:
            pool.set_capacity(self.granted[key], time.monotonic())
        self.poke()

    def _queued(self, key: Key, pool: Pool) -> None:
        if not self._last_sent.get(key, (0.0, False))[1]:
            self.poke()

    def poke(self) -> None:
        """Consider a report at the end of this loop turn (coalesced)."""
        if self._poked or self._loop is None:
            return
        self._poked = True
        self._loop.call_soon(self._report, False)

    def _items(self, now: float, periodic: bool) -> list[Item]:
        items: list[Item] = []
        for key, pool in self.local.pools.items():
            limit = self.limits[self.meta[key]]
            ceiling = limit.capacity(key[1]) or 0.0
            waiting = bool(pool.waiters)
            if isinstance(pool, Slots):
                want = pool.in_use + pool.waiting_amount
            else:
                assert isinstance(pool, Bucket)
                taken, rate = self._use.get(key, (pool.taken, 0.0))
                if periodic:
                    rate = max(0.0, pool.taken - taken) / self.renew_s * 60
                    self._use[key] = (pool.taken, rate)
                want = ceiling if waiting else rate * _HEADROOM
            if key in self.others_waiting and not waiting and want < pool.capacity:
                # another worker waits on this instance: what this one does not need goes back now
                spare_to = math.ceil(want) if isinstance(pool, Slots) else want
                self.given_up[key] = spare_to  # until the next grant
                pool.set_capacity(spare_to, now)
            holds = pool.capacity
            if isinstance(pool, Slots):
                holds = max(holds, pool.in_use)
            items.append(Item(i=key[0], l=self.meta[key], d=key[1], w=want, h=holds, q=waiting))
        return items

    def _report(self, periodic: bool) -> None:
        self._poked = False
        now = time.monotonic()
        items = self._items(now, periodic)
        if not periodic:
            changed = False
            for item in items:
                last = self._last_sent.get((item.i, item.d))
                if last is None or item.h < last[0] - 1e-9 or item.q != last[1]:
                    changed = True
                    break
            if not changed:
                return
        self._last_sent = {(item.i, item.d): (item.h, item.q) for item in items}
        report = Report(worker=self.worker_id, applied=self.applied, items=items)
        self.ledger.add_report(report, now)  # the coordinator may be this worker: it knows at once
        self._send(report)

    def _send(self, message: Report | Grant) -> None:
        sent_at = time.monotonic()
        future: Future[int] = self.log.append(self.topic, 0, self.worker_id.encode(), encode(message))
        future.add_done_callback(_log_failure)
        loop = self._loop
        if isinstance(message, Report) and loop is not None:

            def acked(done: Future[int]) -> None:  # the producer's thread
                if done.exception() is None:
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(self._report_acked, sent_at)

            future.add_done_callback(acked)

    async def _tick(self) -> None:
        while True:
            self._forget_idle()
            self._report(True)
            if self.epoch is not None:
                self._allocate(force=True)
            self.ledger.expire(time.monotonic())
            await asyncio.sleep(self.renew_s)

    def _forget_idle(self) -> None:
        """Drop the pools of keyed instances (a tenant's) unused for ``_IDLE_TICKS`` reports, so
        reports and grants carry only the instances in use; one used again asks for a share anew."""
        for key, pool in list(self.local.pools.items()):
            if key[0] == self.meta.get(key):
                continue  # not keyed: always reported
            used = pool.waiters or (pool.in_use > 0 if isinstance(pool, Slots) else False)
            if isinstance(pool, Bucket):
                used = used or pool.taken != self._use.get(key, (-1.0, 0.0))[0]
            self._idle[key] = 0 if used else self._idle.get(key, 0) + 1
            if self._idle[key] >= _IDLE_TICKS:
                # its share too: the next report no longer holds it, and a pool opened again
                # must wait for a grant made knowing that
                for table in (
                    self.local.pools,
                    self.meta,
                    self._use,
                    self._last_sent,
                    self._idle,
                    self.granted,
                    self.given_up,
                ):
                    table.pop(key, None)

    # ------------------------------------------------------------------------------ coordinating
    def _schedule_allocation(self) -> None:
        if self._allocating or self._loop is None:
            return
        self._allocating = True
        self._loop.call_soon(self._allocate, False)

    def _allocate(self, force: bool) -> None:
        self._allocating = False
        if self.epoch is None or self._read_to < self._catch_up_to:
            return  # not coordinating, or the leases outstanding are not all known yet
        now = time.monotonic()
        live = self.ledger.live(now)
        wants: dict[Key, dict[str, float]] = {}
        limit_of: dict[Key, str] = {}
        for worker, report in live.items():
            for item in report.items:
                wants.setdefault((item.i, item.d), {})[worker] = item.w
                limit_of[(item.i, item.d)] = item.l
        shares: dict[str, list[tuple[str, Dimension, float]]] = {w: [] for w in live}
        for key, by_worker in sorted(wants.items()):
            limit = self.limits.get(limit_of[key])
            capacity = None if limit is None else limit.capacity(key[1])
            if capacity is None:
                continue  # a limit this version does not declare: not this coordinator's to share
            whole = key[1] == "concurrent"
            served = self._served.setdefault(key, {})
            order = sorted(by_worker, key=lambda w: (served.get(w, 0), w))
            bound = self.ledger.bound(key, now)
            targets = fair_targets(capacity, by_worker, whole, order)
            for worker, share in grants(capacity, targets, bound, whole, order).items():
                if share > bound.get(worker, 0.0) + 1e-9:
                    self._serial += 1
                    served[worker] = self._serial
                if share > 0.0:
                    shares[worker].append((key[0], key[1], share))
        last = self._last_grant
        if not force and last is not None and last[1] == shares and now - last[0] < self.renew_s:
            return  # nothing changed, and the last grant's leases are fresh
        # numbered after any grant of this epoch already read (a coordinator that stepped down and
        # came back at the same epoch): a worker applies only grants newer than the last it applied
        self._seq = max(self._seq, self.ledger.last_seq.get(self.epoch, 0)) + 1
        grant = Grant(epoch=self.epoch, seq=self._seq, lease_s=self.lease_s, shares=shares)
        self._last_grant = (now, shares)
        self.ledger.add_grant(grant, now)
        self._send(grant)
        if self.applied is None or grant.order() > self.applied:
            self._apply(grant, now + self.lease_s)  # its own share, without waiting to read it back


def _log_failure(future: Future[int]) -> None:
    error = future.exception()
    if error is not None:  # the next report or grant says it again, a third of a lease later
        log.warning("limits topic: a message was not written: %s", error)
