"""The log port: everything the worker needs from the log, in one protocol with two backends.

``runtime.log.kafka.backend.KafkaLog`` is the production backend (confluent-kafka); ``runtime.log.port.memory.
MemoryLog`` keeps the same records in process, so the worker's semantics -- commit order, fencing,
in-doubt calls, checkpoints -- are unit-tested without a broker. One contract suite
(tests/contract) runs against both, so what the worker relies on is what both provide.

The port speaks bytes: records are (key, value) pairs at offsets of a topic's partition, exactly
as Kafka stores them. Serialization stays at its own seam (``runtime.log.schemas.serde``), and so does the
fencing rule (``runtime.log.records.fencing``): a claim is an ``EpochClaimed`` record like any other.

What a backend promises (the contract suite checks each):
- Appends to one partition are acknowledged in order, each with its offset; an acknowledged
  record means every earlier record of that partition is durable too.
- ``read`` returns a partition's records in offset order from ``start`` up to ``end`` (default: the
  end when the call began), skipping, undecoded, those whose key ``keep`` rejects.
- The commands feed delivers each assigned partition's records in order, starting where the
  assignment callback says, and ``commit`` records the position a restarted member resumes from.
- A tail delivers each followed partition's records in offset order from its start, including
  those appended after it began, and its ``poll`` returns within its timeout when none arrive.
- The ownership check answers True for an offset once every record before it has been read
  without meeting a newer ``EpochClaimed`` -- or is a keyed record this log appended, whose ack
  proved it no claim (Kafka's check: runtime.log.kafka.proven) -- and False once one was met.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from runtime.errors import AgentlogError, RetryableError


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a partition, as stored."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record of the commands feed (``error`` set instead for a consumer-level problem)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    error: str | None = None
    fatal: bool = False


class MembershipFenced(AgentlogError):
    """The workers' group fenced this member: another member joined with its worker id (static
    membership), so the group counts this one as gone. The feed is dead and cannot recover; a
    new one must join. Kafka also fences a member that survived its own session timeout -- a
    group coordinator that moved under load -- and that member is nobody's impostor."""


class WriteError(RetryableError):
    """A record was not acknowledged; carries the backend's error."""


class ReadError(RetryableError):
    """A partition could not be read to the requested offset."""


def settle(future: asyncio.Future[int], outcome: int | BaseException) -> None:
    """Resolve an append's future with its offset or its error, in the future's own loop (a
    backend's acks arrive on other threads: they call this through ``call_soon_threadsafe``)."""
    if future.done():  # cancelled meanwhile (its partition was lost): the ack is dropped
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


# Called with the partitions given to (or taken from) this member; an assignment callback returns
# the offset each given partition's feed must start at.
AssignCallback = Callable[[list[int]], dict[int, int]]
RevokeCallback = Callable[[list[int]], None]


class Committer(Protocol):
    """Where a worker records the commands offset a restarted member resumes from."""

    def commit(self, partition: int, offset: int) -> None:
        """Record that a restarted member may resume ``partition`` at ``offset`` (asynchronous)."""


class CommandFeed(Protocol):
    """This worker's membership of the workers' group on the commands topic."""

    def bind(self, on_assign: AssignCallback, on_revoke: RevokeCallback) -> None:
        """Route partition changes to the worker (they arrive only from ``poll``)."""

    def poll(self, max_records: int, timeout_s: float) -> list[Delivery]:
        """The next records of the assigned partitions (and runs assignment callbacks); raises
        ``MembershipFenced`` once the group has fenced this member."""

    def commit(self, partition: int, offset: int) -> None:
        """Record that a restarted member may resume ``partition`` at ``offset`` (asynchronous)."""

    def pause(self, partitions: list[int]) -> None:
        """Fetch no more of ``partitions`` until resumed (those not assigned are left alone)."""

    def resume(self, partitions: list[int]) -> None:
        """Fetch ``partitions`` again from where their delivery stopped."""

    def close(self) -> None: ...


class OwnershipCheck(Protocol):
    """Proof, per owned partition, that no newer claim precedes a given offset."""

    def watch(self, partition: int, epoch: int) -> None: ...

    def unwatch(self, partition: int) -> None: ...

    async def owned_through(self, partition: int, offset: int) -> bool:
        """True once ``offset`` has been read with no foreign claim before it; False if fenced."""

    def notice_foreign(
        self,
        check: Callable[[int, bytes], bool],
        report: Callable[[list[tuple[int, int, bytes, bytes]]], None],
    ) -> None:
        """Also hand each keyed record read to ``check(partition, value)`` (True: not the owner's),
        those it calls foreign to ``report`` as (partition, offset, key, value), and read the owned
        partitions every second or so even when no check waits (runtime.worker.foreign)."""

    def close(self) -> None: ...


class Tail(Protocol):
    """Follows partitions of one topic as they grow (a client's results feed): one reader for many
    partitions, each read in offset order from where ``follow`` started it."""

    def follow(self, partition: int, start: int) -> None:
        """Read ``partition`` from ``start`` on; a partition already followed is left as it is."""

    def poll(self, timeout_s: float) -> list[tuple[int, LogRecord]]:
        """(partition, record) pairs read since the last poll; waits up to ``timeout_s`` for the first."""

    def close(self) -> None: ...


class EventLog(Protocol):
    """Appends, reads and group membership of one deployment's topics."""

    @property
    def failure(self) -> str | None:
        """Why an unwatched record was not acknowledged, once one was not: its owner must stop."""

    def append(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> Future[int]:
        """Append one record; the thread-safe future resolves to its offset once acknowledged."""

    def append_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        records: list[tuple[bytes | None, bytes]],
        watched: dict[int, asyncio.Future[int]],
    ) -> None:
        """Append ``records`` to one partition together; each future of ``watched`` (by record index)
        is resolved in ``loop`` with its record's offset once acknowledged."""

    def append_unwatched(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        """Append a record nobody waits for; a later record's ack vouches for it, a failure goes to
        ``failure``."""

    def read(
        self,
        topic: str,
        partition: int,
        start: int | None = None,
        end: int | None = None,
        keep: Callable[[bytes | None], bool] | None = None,
    ) -> Iterator[LogRecord]:
        """Records of one partition from ``start`` (default: the first kept) up to ``end`` (default:
        the end now), in offset order; ``keep`` filters on the key before anything is decoded."""

    def read_partitions(
        self, topic: str, ranges: Mapping[int, tuple[int | None, int | None]]
    ) -> Iterator[tuple[int, LogRecord]]:
        """``read`` of several partitions at once, each from its ``(start, end)``: ``(partition,
        record)`` pairs, in offset order within a partition, interleaved across them."""

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """The first offset still held and the offset the next append will get."""

    def join(self, worker_id: str, session_timeout_ms: int) -> CommandFeed:
        """Join the workers' group on the commands topic."""

    def tail(self, topic: str) -> Tail:
        """A reader that follows partitions of ``topic`` as records are appended."""

    def commands_owner(self, partition: int) -> str | None:
        """The member of the workers' group that the commands ``partition`` is assigned to now (its
        worker id), or None if no member holds it."""

    def ownership(
        self, loop: asyncio.AbstractEventLoop, is_claim: Callable[[int, bytes], bool]
    ) -> OwnershipCheck:
        """An ownership check over the events topic; ``is_claim(partition, value)`` tells a keyless
        record that is an ``EpochClaimed`` a worker wrote there (the port does not decode)."""

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every append is acknowledged; WriteError if some is not within ``timeout``."""

    def close(self) -> None: ...
