"""Instant pickup: the commands feed is polled in a thread of its own that blocks until a command
arrives, and hands each batch to the worker's loop.

A loop that polled the feed without blocking had to nap between polls (2-10 ms), and a
submission waited out the nap. Here the thread waits in the feed's poll -- in librdkafka, without
the GIL -- and the batch reaches the loop one ``call_soon_threadsafe`` after it arrives.

What stays as it was:
- Partition changes still run in the loop: the feed calls its assignment callbacks from poll,
  in this thread, and each is carried to the loop and waited for (the consumer resumes a given
  partition at the offset the loop's answer names, as before).
- One batch at a time: the thread polls again only once the loop has taken the last batch, so a
  backlog stays in the feed instead of piling up in the loop's queue, and a batch is delivered
  before a later revoke of its partition is.
- A fenced membership (``MembershipFenced``: Kafka fences a static member whose session timed
  out while its group coordinator moved, not only an impostor with its id) is not the end of the
  worker: the partitions the feed held are dropped in the loop, as a revoke drops them, and a new
  feed joins the group and is assigned afresh (a new claim and rebuild each, as after a restart).
  Fenced again within ``REFENCED_WITHIN_S`` of rejoining means another worker runs with this
  worker's id: then the intake fails and the worker stops, saying so.
- Every call on the feed happens in this thread while it runs: a Kafka consumer call from
  another thread waits for the poll in progress, and the next, and the next (the checkpointer's
  ``commit`` never got through). ``commit`` is queued and made before the next poll; ``close``
  comes from the loop once ``stop`` has joined the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from runtime import stagemarks
from runtime.log.port.protocol import AssignCallback, CommandFeed, Delivery, MembershipFenced, RevokeCallback

log = logging.getLogger("agentlog.worker")

A = TypeVar("A")
R = TypeVar("R")

# How long one poll of the feed blocks: the longest the thread takes to notice ``stop``.
_WAIT_S = 0.1
_MAX_RECORDS = 500
# Fenced twice this close together: not a coordinator's hiccup but two workers sharing an id,
# who would fence each other forever.
REFENCED_WITHIN_S = 60.0


class CommandIntake:
    """Polls ``feed`` in a thread; ``deliver`` receives each batch in ``loop``."""

    def __init__(
        self,
        feed: CommandFeed,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[Delivery]], None],
        on_assign: AssignCallback,
        on_revoke: RevokeCallback,
        rejoin: Callable[[], CommandFeed] | None = None,
    ) -> None:
        self.feed = feed
        self.rejoin = rejoin
        self._held: set[int] = set()  # partitions the current feed has assigned (this thread's)
        self._fenced_at: float | None = None
        self.loop = loop
        self.deliver = deliver
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.failure: BaseException | None = None
        self._running = False
        self._thread: threading.Thread | None = None
        self._commits: dict[int, int] = {}  # partition -> offset, queued for the thread
        self._pauses: dict[int, bool] = {}  # partition -> paused (True) or resumed, queued likewise
        self._lock = threading.Lock()

    def start(self) -> None:
        self.feed.bind(self._assigned, self._revoked)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="agentlog-intake", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop polling and wait for the thread (the loop keeps serving a callback it waits on)."""
        self._running = False
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self.feed.bind(self.on_assign, self.on_revoke)  # ``close`` from the loop calls them directly

    def commit(self, partition: int, offset: int) -> None:
        """``feed.commit``, made by the thread before its next poll (asynchronous anyway)."""
        with self._lock:
            self._commits[partition] = offset

    def _run(self) -> None:
        try:
            while self._running:
                self._commit_queued()
                try:
                    deliveries = self.feed.poll(_MAX_RECORDS, _WAIT_S)
                except MembershipFenced as fenced:
                    self._rejoin_after(fenced)
                    continue
                if deliveries:
                    if stagemarks.ON:
                        for delivery in deliveries:
                            stagemarks.mark("intake polled", delivery.key)
                    self._in_loop(self.deliver, deliveries)
            self._commit_queued()
        except BaseException as error:  # the loop stops on it (Worker.serve checks ``failure``)
            self.failure = error

    def pause(self, partition: int) -> None:
        """``feed.pause``, made by the thread before its next poll (runtime.worker.admission)."""
        with self._lock:
            self._pauses[partition] = True

    def resume(self, partition: int) -> None:
        """``feed.resume``, made by the thread before its next poll."""
        with self._lock:
            self._pauses[partition] = False

    def _commit_queued(self) -> None:
        with self._lock:
            commits, self._commits = self._commits, {}
            pauses, self._pauses = self._pauses, {}
        for partition, offset in commits.items():
            self.feed.commit(partition, offset)
        for partition, paused in pauses.items():
            if paused:
                self.feed.pause([partition])
            else:
                self.feed.resume([partition])

    def _rejoin_after(self, fenced: MembershipFenced) -> None:
        now = time.monotonic()
        if self.rejoin is None:
            raise fenced
        if self._fenced_at is not None and now - self._fenced_at < REFENCED_WITHIN_S:
            raise MembershipFenced(
                f"fenced again {now - self._fenced_at:.0f} s after rejoining the workers' group ({fenced}): "
                "another worker is running with this worker id; give each worker its own --worker-id"
            ) from fenced
        self._fenced_at = now
        held, self._held = sorted(self._held), set()
        log.warning(json.dumps({"event": "membership_fenced", "why": str(fenced), "partitions": held}))
        self._in_loop(self.on_revoke, held)  # calls in flight end in doubt; the next claim fences them
        with self._lock:
            self._commits.clear()  # positions of the fenced membership: the new one commits its own
            self._pauses.clear()
        self.feed.close()
        self.feed = self.rejoin()
        self.feed.bind(self._assigned, self._revoked)

    def _assigned(self, partitions: list[int]) -> dict[int, int]:
        stagemarks.start("assignment polled")
        starts = self._in_loop(self.on_assign, partitions)
        self._held.update(partitions)
        return starts

    def _revoked(self, partitions: list[int]) -> None:
        self._held.difference_update(partitions)
        self._in_loop(self.on_revoke, partitions)

    def _in_loop(self, call: Callable[[A], R], argument: A) -> R:
        """``call(argument)`` run in the loop; waits for its answer (or its exception)."""
        done: concurrent.futures.Future[R] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(call(argument))
            except BaseException as error:  # re-raised below, in this thread
                done.set_exception(error)

        self.loop.call_soon_threadsafe(run)
        while True:
            try:
                return done.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                if self.loop.is_closed():
                    raise RuntimeError("the worker's loop closed under the commands intake") from None
