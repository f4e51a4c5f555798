"""The log port's contract, one suite run against every backend (in memory, and real Kafka).

Each backend's test class differs only in ``make_log``: what the worker relies on -- ordered
acks with offsets, bounded reads with a key filter, the commands feed, the ownership check --
is what both provide. The Kafka class runs against the broker started by `agentlog infra up`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.kafka.ownership import KafkaOwnershipCheck
from runtime.log.port.memory import MemoryLog
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import Delivery, EventLog, MembershipFenced
from support.wait import wait_until

CLAIM = b"claim"  # the contract's stand-in for an encoded EpochClaimed (the port does not decode)


def is_claim(partition: int, value: bytes) -> bool:
    del partition
    return value == CLAIM


class EventLogContract:
    """Subclassed once per backend; ``settings`` names the topics, 3 partitions each."""

    settings: Settings

    def make_log(self) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def log(self) -> Iterator[EventLog]:
        log = self.make_log()
        yield log
        log.close()

    def append_all(self, log: EventLog, topic: str, partition: int, values: list[bytes]) -> list[int]:
        futures: list[Future[int]] = [log.append(topic, partition, b"k", v) for v in values]
        return [f.result(timeout=30) for f in futures]

    # -- appends -----------------------------------------------------------------------------------
    def test_appends_to_a_partition_are_acknowledged_in_order_with_their_offsets(self, log: EventLog) -> None:
        topic = self.settings.events_topic
        offsets = self.append_all(log, topic, 1, [b"a", b"b", b"c"])
        assert offsets == [0, 1, 2]
        assert log.watermarks(topic, 1) == (0, 3)
        assert log.watermarks(topic, 0) == (0, 0)
        assert log.failure is None

    def test_a_keyed_append_without_a_partition_goes_to_the_runs_partition(self, log: EventLog) -> None:
        topic = self.settings.commands_topic
        for run_id in ("run-a", "run-b", "run-c", "run-d"):
            log.append(topic, None, run_id.encode(), b"x").result(timeout=30)
            expected = partition_for(run_id, self.settings.partitions)
            assert [r.key for r in log.read(topic, expected)][-1] == run_id.encode()

    def test_a_batch_resolves_its_watched_futures_in_the_loop(self, log: EventLog) -> None:
        topic = self.settings.events_topic

        async def batch() -> tuple[int, int]:
            loop = asyncio.get_running_loop()
            first, last = loop.create_future(), loop.create_future()
            records: list[tuple[bytes | None, bytes]] = [(b"r", b"0"), (b"r", b"1"), (None, b"2")]
            log.append_batch(loop, topic, 2, records, {0: first, 2: last})
            return await asyncio.wait_for(first, 30), await asyncio.wait_for(last, 30)

        assert asyncio.run(batch()) == (0, 2)
        assert [(r.offset, r.key, r.value) for r in log.read(topic, 2)] == [
            (0, b"r", b"0"),
            (1, b"r", b"1"),
            (2, None, b"2"),
        ]

    def test_an_unwatched_append_is_vouched_for_by_a_later_ack(self, log: EventLog) -> None:
        topic = self.settings.checkpoints_topic
        log.append_unwatched(topic, 0, b"run/x", b"1")
        assert log.append(topic, 0, b"checkpoint/0", b"cp").result(timeout=30) == 1
        log.flush()
        assert [r.key for r in log.read(topic, 0)] == [b"run/x", b"checkpoint/0"]
        assert log.failure is None

    # -- reads -------------------------------------------------------------------------------------
    def test_read_is_bounded_by_start_and_end_and_filters_on_the_key(self, log: EventLog) -> None:
        topic = self.settings.events_topic
        for i in range(6):
            log.append(topic, 0, b"even" if i % 2 == 0 else b"odd", str(i).encode()).result(timeout=30)
        assert [r.offset for r in log.read(topic, 0)] == [0, 1, 2, 3, 4, 5]
        assert [r.offset for r in log.read(topic, 0, start=2, end=5)] == [2, 3, 4]
        assert [r.value for r in log.read(topic, 0, keep=lambda k: k == b"odd")] == [b"1", b"3", b"5"]
        assert list(log.read(topic, 0, start=6)) == []
        assert list(log.read(topic, 0, start=3, end=3)) == []

    def test_reading_an_empty_partition_returns_nothing(self, log: EventLog) -> None:
        assert list(log.read(self.settings.payloads_topic, 1)) == []

    def test_several_partitions_are_read_at_once_each_within_its_own_bounds(self, log: EventLog) -> None:
        topic = self.settings.events_topic
        for partition, count in ((0, 5), (1, 3), (2, 4)):
            for i in range(count):
                log.append(topic, partition, b"k", f"{partition}:{i}".encode()).result(timeout=30)
        ranges = {0: (1, 4), 1: (None, None), 2: (4, None)}  # partition 2: nothing from its end on
        got: dict[int, list[tuple[int, bytes | None]]] = {}
        for partition, record in log.read_partitions(topic, ranges):
            got.setdefault(partition, []).append((record.offset, record.value))
        assert got == {
            0: [(1, b"0:1"), (2, b"0:2"), (3, b"0:3")],
            1: [(0, b"1:0"), (1, b"1:1"), (2, b"1:2")],
        }
        assert list(log.read_partitions(topic, {})) == []

    # -- the commands feed ---------------------------------------------------------------------------
    def test_the_feed_delivers_from_where_the_assignment_says_in_order(self, log: EventLog) -> None:
        topic = self.settings.commands_topic
        for i in range(4):
            log.append(topic, 0, b"run", f"c{i}".encode()).result(timeout=30)
        assigned: list[list[int]] = []
        revoked: list[list[int]] = []

        def on_assign(partitions: list[int]) -> dict[int, int]:
            assigned.append(sorted(partitions))
            return {p: 1 if p == 0 else 0 for p in partitions}

        feed = log.join("contract-worker", 6000)
        feed.bind(on_assign, revoked.append)
        got: list[Delivery] = []

        def three_delivered() -> bool:
            got.extend(d for d in feed.poll(100, 0.2) if d.error is None)
            return len(got) >= 3

        try:
            wait_until(three_delivered, 30, "three commands from the feed", interval=0)
            feed.commit(0, 4)
        finally:
            feed.close()
        assert assigned == [[0, 1, 2]]
        assert [(d.partition, d.offset, d.value) for d in got] == [
            (0, 1, b"c1"),
            (0, 2, b"c2"),
            (0, 3, b"c3"),
        ]

    def test_commands_owner_is_the_member_the_partition_is_assigned_to(self, log: EventLog) -> None:
        assert log.commands_owner(0) is None  # nobody joined the group yet
        feed = log.join("owner-worker", 6000)
        feed.bind(lambda partitions: {p: 0 for p in partitions}, lambda partitions: None)

        def owners() -> list[str | None]:
            return [log.commands_owner(p) for p in range(self.settings.partitions)]

        def owns_all() -> bool:
            feed.poll(10, 0.2)  # the assignment arrives from poll
            return owners() == ["owner-worker"] * self.settings.partitions

        try:
            wait_until(
                owns_all, 30, "the member to own every partition", interval=0, detail=lambda: str(owners())
            )
        finally:
            feed.close()

    def test_a_member_joining_with_the_same_worker_id_fences_the_earlier_one(self, log: EventLog) -> None:
        first = log.join("fenced-worker", 6000)
        first.bind(lambda partitions: {p: 0 for p in partitions}, lambda partitions: None)

        def first_owns() -> bool:
            first.poll(10, 0.2)
            return log.commands_owner(0) == "fenced-worker"

        try:
            wait_until(first_owns, 30, "the first member to own partition 0", interval=0)
            second = log.join("fenced-worker", 6000)
            second.bind(lambda partitions: {p: 0 for p in partitions}, lambda partitions: None)

            def both_poll() -> bool:
                second.poll(10, 0.2)  # its join fences the first member at the coordinator
                first.poll(10, 0.2)
                return False  # until MembershipFenced

            try:
                with pytest.raises(MembershipFenced):
                    wait_until(both_poll, 30, "the first member to be fenced", interval=0)
            finally:
                second.close()
        finally:
            first.close()

    # -- the tail ------------------------------------------------------------------------------------
    def test_a_tail_delivers_each_followed_partition_from_its_start_including_later_appends(
        self, log: EventLog
    ) -> None:
        topic = self.settings.events_topic
        self.append_all(log, topic, 0, [b"a0", b"a1"])
        self.append_all(log, topic, 1, [b"b0"])
        self.append_all(log, topic, 2, [b"unfollowed"])
        tail = log.tail(topic)
        try:
            tail.follow(0, 1)
            tail.follow(1, 0)
            tail.follow(0, 0)  # already followed: stays where it started
            got: list[tuple[int, int, bytes | None]] = []

            def read_until(count: int) -> None:
                def read() -> bool:
                    got.extend((p, r.offset, r.value) for p, r in tail.poll(0.2))
                    return len(got) >= count

                wait_until(read, 30, f"{count} records from the tail", interval=0, detail=lambda: str(got))

            read_until(2)
            self.append_all(log, topic, 0, [b"a2", b"a3"])
            self.append_all(log, topic, 2, [b"still unfollowed"])
            read_until(4)
            assert sorted(got) == [(0, 1, b"a1"), (0, 2, b"a2"), (0, 3, b"a3"), (1, 0, b"b0")]
            assert [o for p, o, _ in got if p == 0] == [1, 2, 3]  # in offset order
        finally:
            tail.close()

    def test_a_tail_poll_returns_within_its_timeout_when_nothing_arrives(self, log: EventLog) -> None:
        tail = log.tail(self.settings.events_topic)
        try:
            tail.follow(2, 0)
            started = time.monotonic()
            assert tail.poll(0.3) == []
            assert time.monotonic() - started < 2.0
        finally:
            tail.close()

    # -- ownership -----------------------------------------------------------------------------------
    def test_ownership_holds_until_a_newer_claim_is_met(self, log: EventLog) -> None:
        topic = self.settings.events_topic
        epoch = log.append(topic, 0, None, CLAIM).result(timeout=30)
        ours = self.append_all(log, topic, 0, [b"e1", b"e2"])

        async def check() -> tuple[bool, bool, bool]:
            ownership = log.ownership(asyncio.get_running_loop(), is_claim)
            ownership.watch(0, epoch)
            try:
                before = await asyncio.wait_for(ownership.owned_through(0, ours[-1]), 30)
                log.append(topic, 0, None, CLAIM).result(timeout=30)  # another worker's claim
                after = self.append_all(log, topic, 0, [b"zombie"])[0]
                fenced = await asyncio.wait_for(ownership.owned_through(0, after), 30)
                earlier = await asyncio.wait_for(ownership.owned_through(0, ours[0]), 30)
                return before, fenced, earlier
            finally:
                ownership.close()

        before, fenced, earlier = asyncio.run(check())
        assert before is True
        assert fenced is False
        assert earlier is False  # once fenced, the partition is not ours for anything


@pytest.mark.unit
class TestMemoryLog(EventLogContract):
    settings = Settings(
        partitions=3,
        commands_topic="c.commands",
        events_topic="c.events",
        checkpoints_topic="c.checkpoints",
        payloads_topic="c.payloads",
    )

    def make_log(self) -> EventLog:
        return MemoryLog(self.settings)


@pytest.mark.integration
class TestKafkaLog(EventLogContract):
    @pytest.fixture(autouse=True)
    def _topics(self, deployment: Settings) -> None:
        self.settings = deployment

    def make_log(self) -> EventLog:
        return KafkaLog(self.settings)

    # -- ownership proven by our own acks (Kafka's check counts them; runtime.log.kafka.proven) -------
    def test_our_own_keyed_records_are_proven_by_their_acks_without_reading(self, log: EventLog) -> None:
        topic = self.settings.events_topic
        epoch = log.append(topic, 1, None, CLAIM).result(timeout=30)

        async def check() -> tuple[bool, int]:
            ownership = log.ownership(asyncio.get_running_loop(), is_claim)
            assert isinstance(ownership, KafkaOwnershipCheck)
            ownership.watch(1, epoch)
            try:
                ours = self.append_all(log, topic, 1, [b"e1", b"e2", b"e3"])
                owned = await asyncio.wait_for(ownership.owned_through(1, ours[-1]), 30)
                return owned, ownership.records_read
            finally:
                ownership.close()

        owned, read = asyncio.run(check())
        assert owned is True
        assert read == 0  # nothing of the events partition was read: the acks proved it

    def test_a_record_another_writer_put_among_ours_is_read_and_a_claim_there_fences(
        self, log: EventLog
    ) -> None:
        topic = self.settings.events_topic
        other = KafkaLog(self.settings)  # another process's producer: its acks are not ours
        epoch = log.append(topic, 2, None, CLAIM).result(timeout=30)

        async def check() -> tuple[bool, int, bool, bool]:
            ownership = log.ownership(asyncio.get_running_loop(), is_claim)
            assert isinstance(ownership, KafkaOwnershipCheck)
            ownership.watch(2, epoch)
            try:
                self.append_all(log, topic, 2, [b"e1"])
                self.append_all(other, topic, 2, [b"not ours"])  # a gap in our acks: read, not a claim
                mine = self.append_all(log, topic, 2, [b"e2"])[0]
                across_gap = await asyncio.wait_for(ownership.owned_through(2, mine), 30)
                read = ownership.records_read
                other.append(topic, 2, None, CLAIM).result(timeout=30)  # a newer owner's claim
                # Our records after it are acked (and counted): they do not vouch for the gap.
                after = self.append_all(log, topic, 2, [b"zombie1", b"zombie2"])[-1]
                fenced = await asyncio.wait_for(ownership.owned_through(2, after), 30)
                late = self.append_all(log, topic, 2, [b"zombie3"])[0]
                still = await asyncio.wait_for(ownership.owned_through(2, late), 30)
                return across_gap, read, fenced, still
            finally:
                ownership.close()

        try:
            across_gap, read, fenced, still = asyncio.run(check())
        finally:
            other.close()
        assert across_gap is True
        assert read >= 1  # the other writer's record was read to prove it is no claim
        assert fenced is False
        assert still is False
