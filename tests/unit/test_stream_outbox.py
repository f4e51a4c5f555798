"""The stream outbox (runtime.worker.stream_outbox): records published on the loop leave together
at the turn's end, in order; a record published off the loop goes after what the loop gathered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from runtime.worker.stream_outbox import StreamRecord, TurnOutbox

pytestmark = pytest.mark.unit


class Calls:
    """A StreamOut that notes each call it is given (the producer's calls are what is saved)."""

    def __init__(self) -> None:
        self.calls: list[list[StreamRecord]] = []
        self.flushed = 0

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.calls.append([(topic, partition, key, value)])

    def publish_many(self, records: Sequence[StreamRecord]) -> None:
        self.calls.append(list(records))

    def flush(self, timeout: float = 5.0) -> None:
        self.flushed += 1


def record(n: int, partition: int = 0) -> StreamRecord:
    return ("s", partition, b"run", str(n).encode())


async def test_a_turn_s_records_leave_in_one_call_in_order_at_its_end() -> None:
    out = Calls()
    box = TurnOutbox(out)
    for n in range(3):
        box.publish(*record(n, partition=n % 2))
    assert out.calls == []  # not before the turn ends
    await asyncio.sleep(0)
    assert out.calls == [[record(0, 0), record(1, 1), record(2, 0)]]
    box.publish(*record(3))
    await asyncio.sleep(0)
    assert out.calls[1:] == [[record(3)]]  # the next turn's, in a call of its own


async def test_an_activation_s_records_join_the_turn_s_in_order() -> None:
    out = Calls()
    box = TurnOutbox(out)
    box.publish(*record(0))
    box.publish_all([record(1), record(2, partition=1)])  # an activation's, gathered at once
    box.publish(*record(3))
    assert out.calls == []
    await asyncio.sleep(0)
    assert out.calls == [[record(0), record(1), record(2, 1), record(3)]]
    box.publish_all([record(4)])  # the first of a turn schedules its drain
    await asyncio.sleep(0)
    assert out.calls[1:] == [[record(4)]]


def test_records_published_together_off_the_loop_go_at_once() -> None:
    out = Calls()
    TurnOutbox(out).publish_all([record(0), record(1)])
    assert out.calls == [[record(0), record(1)]]


async def test_a_record_published_off_the_loop_goes_after_what_the_loop_gathered() -> None:
    out = Calls()
    box = TurnOutbox(out)
    box.publish(*record(0))  # an attempt's start, on the loop
    thread = threading.Thread(target=box.publish, args=record(1))  # its delta, from a pool thread
    thread.start()
    thread.join()
    assert out.calls == [[record(0)], [record(1)]]
    await asyncio.sleep(0)
    assert out.calls == [[record(0)], [record(1)]]  # nothing left to send at the turn's end


async def test_flush_sends_what_is_gathered_then_flushes_the_producer() -> None:
    out = Calls()
    box = TurnOutbox(out)
    box.publish(*record(0))
    box.flush()
    assert out.calls == [[record(0)]] and out.flushed == 1


def test_without_a_running_loop_a_record_goes_at_once() -> None:
    out = Calls()
    TurnOutbox(out).publish(*record(0))
    assert out.calls == [[record(0)]]
