"""The commands intake (runtime.worker.intake): the feed is polled, blocking, in a thread of its
own; batches and partition changes reach the loop; every call on the feed stays in that thread
(a Kafka consumer call from another thread waits behind the poll in progress)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.log.port.protocol import AssignCallback, Delivery, RevokeCallback
from runtime.worker.intake import CommandIntake
from support.memory_harness import until

pytestmark = pytest.mark.unit


class RecordingFeed:
    """A feed that assigns partition 0 at its first poll, then delivers ``batches`` one per poll."""

    def __init__(self, batches: list[list[Delivery]], error: Exception | None = None) -> None:
        self.batches = batches
        self.error = error
        self.calls: list[tuple[str, int, float]] = []  # (call, thread ident, poll timeout)
        self.commits: list[tuple[int, int]] = []
        self.on_assign: AssignCallback | None = None
        self.on_revoke: RevokeCallback | None = None
        self.assigned: dict[int, int] = {}

    def bind(self, on_assign: AssignCallback, on_revoke: RevokeCallback) -> None:
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def poll(self, max_records: int, timeout_s: float) -> list[Delivery]:
        self.calls.append(("poll", threading.get_ident(), timeout_s))
        if self.error is not None:
            raise self.error
        if not self.assigned:
            assert self.on_assign is not None
            self.assigned = self.on_assign([0])
        if self.batches:
            return self.batches.pop(0)
        threading.Event().wait(timeout_s)  # blocks, as a consumer's poll does
        return []

    def commit(self, partition: int, offset: int) -> None:
        self.calls.append(("commit", threading.get_ident(), 0.0))
        self.commits.append((partition, offset))

    def close(self) -> None:
        self.calls.append(("close", threading.get_ident(), 0.0))


async def test_batches_and_assignments_reach_the_loop_from_a_thread_that_blocks_in_poll() -> None:
    loop_thread = threading.get_ident()
    batch = [Delivery(0, 7, b"run", b"submitted")]
    feed = RecordingFeed([batch])
    seen: list[tuple[str, int, object]] = []

    def on_assign(partitions: list[int]) -> dict[int, int]:
        seen.append(("assign", threading.get_ident(), partitions))
        return {p: 7 for p in partitions}

    def deliver(deliveries: list[Delivery]) -> None:
        seen.append(("deliver", threading.get_ident(), deliveries))

    intake = CommandIntake(feed, asyncio.get_running_loop(), deliver, on_assign, lambda p: None)
    intake.start()
    await until(lambda: len(seen) == 2, what="the assignment and the batch")
    await intake.stop()
    assert seen == [("assign", loop_thread, [0]), ("deliver", loop_thread, batch)]
    assert feed.assigned == {0: 7}  # the loop's answer reached the feed
    polls = [call for call in feed.calls if call[0] == "poll"]
    assert polls and all(ident != loop_thread for _, ident, _ in polls)
    assert all(timeout > 0 for _, _, timeout in polls)  # it blocks: no napping loop polls it


async def test_a_commit_from_the_loop_is_made_by_the_polling_thread() -> None:
    feed = RecordingFeed([])
    intake = CommandIntake(feed, asyncio.get_running_loop(), lambda d: None, lambda p: {}, lambda p: None)
    intake.start()
    await until(lambda: feed.calls, what="the first poll")
    intake.commit(0, 10)
    intake.commit(0, 12)  # only the latest offset of a partition matters
    await until(lambda: feed.commits, what="the commit")
    await intake.stop()
    assert feed.commits == [(0, 12)]
    pollers = {ident for call, ident, _ in feed.calls if call == "poll"}
    committers = {ident for call, ident, _ in feed.calls if call == "commit"}
    assert committers == pollers and threading.get_ident() not in committers


async def test_a_feed_error_is_kept_for_the_loop() -> None:
    feed = RecordingFeed([], error=RuntimeError("broker said no"))
    intake = CommandIntake(feed, asyncio.get_running_loop(), lambda d: None, lambda p: {}, lambda p: None)
    intake.start()
    await until(lambda: intake.failure, what="the failure")
    await intake.stop()
    assert str(intake.failure) == "broker said no"
