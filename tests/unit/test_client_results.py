"""Results pushed, not polled (runtime.results) on the in-memory log: one tail per client answers
``result``, ``wait`` and ``results``, honours fencing as ``Client.events`` does, answers a run that
ended already without reading the partition again, and says on a timeout whether a worker holds
the run's partition."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from runtime.client import Client, RunError
from runtime.log.port.protocol import LogRecord
from runtime.log.records.events import EpochClaimed, ModelCallScheduled, RunCompleted, RunStarted
from runtime.results import ResultTail
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness

pytestmark = pytest.mark.unit


def echo_app() -> App:
    app = App("echo")

    @app.tool("double")
    def double(n: int) -> int:
        return 2 * n

    @app.workflow("twice")
    async def twice(ctx: Context, n: int) -> dict[str, Any]:
        return {"n": n, "doubled": await ctx.tool("double", n=n)}

    return app


def result_tails() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentlog-results"]


async def test_wait_returns_the_result_pushed_by_the_tail_while_the_worker_runs_in_this_loop() -> None:
    h = Harness(echo_app())
    h.start()
    run = h.client.submit("twice", 21)
    assert await run.wait(timeout=5) == {"n": 21, "doubled": 42}
    await h.stop_all()
    h.client.close()


async def test_many_runs_are_answered_by_one_tail() -> None:
    h = Harness(echo_app())
    before = len(result_tails())
    h.start()
    runs = [h.client.submit("twice", i).run_id for i in range(40)]
    answers = await asyncio.gather(*(h.client.run(run).wait(timeout=10) for run in runs[:20]))
    assert [a["doubled"] for a in answers] == [2 * i for i in range(20)]
    many = await asyncio.to_thread(h.client.results, runs, 10)
    assert list(many) == runs
    assert [many[r]["doubled"] for r in runs] == [2 * i for i in range(40)]
    assert len(result_tails()) == before + 1
    await h.stop_all()
    h.client.close()
    assert len(result_tails()) == before


async def test_a_run_that_ended_already_answers_without_reading_the_partition() -> None:
    h = Harness(echo_app())
    h.start()
    run = h.client.submit("twice", 5)
    assert await run.wait(timeout=5) == {"n": 5, "doubled": 10}
    await h.stop_all()

    def no_reads(*args: object, **kwargs: object) -> list[LogRecord]:
        raise AssertionError("the partition was read again")

    h.log.read = no_reads  # type: ignore[method-assign]
    assert run.result(timeout=1) == {"n": 5, "doubled": 10}
    h.client.close()


async def test_a_run_another_client_submitted_is_read_from_the_partition_start() -> None:
    h = Harness(echo_app())
    h.start()
    run = h.client.submit("twice", 3).run_id
    await h.client.run(run).wait(timeout=5)
    other = Client(h.settings, identity="other", log=h.log, serde=h.serde)
    assert await other.run(run).wait(timeout=5) == {"n": 3, "doubled": 6}
    later = h.client.submit("twice", 4).run_id  # not yet ended when the other client starts waiting
    assert await other.run(later).wait(timeout=5) == {"n": 4, "doubled": 8}
    await h.stop_all()
    other.close()
    h.client.close()


def test_a_fenced_ending_event_is_not_the_result() -> None:
    h = Harness(echo_app())  # no worker: the test writes the run's events itself
    run = h.client.submit("twice", 1).run_id
    topic, key = h.settings.events_topic, run.encode()

    def append(key: bytes | None, event: Any) -> int:
        return h.log.append(topic, 0, key, h.serde.encode(event)).result()

    first = append(None, EpochClaimed(run_id="", partition=0, worker="old"))
    append(key, RunStarted(run_id=run, workflow="twice", input="1", command_offset=0, epoch=first))
    second = append(None, EpochClaimed(run_id="", partition=0, worker="new"))
    append(key, RunCompleted(run_id=run, result='"zombie"', epoch=first))  # behind the newer claim
    append(key, RunCompleted(run_id=run, result='"real"', epoch=second))
    # The first ending event admitted is the run's end: the zombie's would have been it.
    assert h.client.run(run).result(timeout=5) == "real"
    h.client.close()


def test_a_zombie_s_ending_is_fenced_by_the_owner_s_records_the_tail_does_not_decode() -> None:
    """The tail starts past both claims, so only the owner's records carry its epoch; a record that
    is neither a start nor an end is read for its epoch alone (``Serde.peek``) and still fences."""
    h = Harness(echo_app())
    topic = h.settings.events_topic

    def append(key: bytes | None, event: Any) -> int:
        return h.log.append(topic, 0, key, h.serde.encode(event)).result()

    first = append(None, EpochClaimed(run_id="", partition=0, worker="old"))
    second = append(None, EpochClaimed(run_id="", partition=0, worker="new"))
    run = h.client.submit("twice", 1).run_id  # the tail follows partition 0 from here
    key = run.encode()
    scheduled = ModelCallScheduled(run_id=run, position=1, model="m", args_hash="h", epoch=second)
    assert h.serde.peek(h.serde.encode(scheduled)) == ("ModelCallScheduled", second)
    append(key, scheduled)
    append(key, RunCompleted(run_id=run, result='"zombie"', epoch=first))
    append(key, RunCompleted(run_id=run, result='"real"', epoch=second))
    assert h.client.run(run).result(timeout=5) == "real"
    h.client.close()


def test_a_timeout_says_that_no_worker_holds_the_partition() -> None:
    h = Harness(echo_app())
    run = h.client.submit("twice", 1)
    with pytest.raises(RunError) as raised:
        run.result(timeout=0.2)
    assert raised.value.status == "timeout"
    assert "status unknown" in raised.value.reason
    assert "no worker of group 'agentlog-workers' holds its partition 0" in raised.value.reason
    h.client.close()


def test_a_timeout_names_the_worker_the_partition_is_assigned_to() -> None:
    h = Harness(echo_app())
    feed = h.log.join("stalled-worker", 10_000)  # a member that never polls: it takes no command
    run = h.client.submit("twice", 1)
    with pytest.raises(RunError) as raised:
        run.result(timeout=0.2)
    assert "its partition 0 is assigned to worker 'stalled-worker'" in raised.value.reason
    feed.close()
    h.client.close()


async def test_a_run_whose_key_was_dropped_is_answered_by_reading_its_partition() -> None:
    h = Harness(echo_app())
    h.client._endings._tail = ResultTail(h.log, h.client.serde, h.settings.events_topic, keep=2)
    runs = [h.client.submit("twice", i).run_id for i in range(3)]  # a client that only submits stays bounded
    assert not h.client._endings._tail.is_watched(runs[0])
    assert all(h.client._endings._tail.is_watched(run) for run in runs[1:])
    h.start()
    assert [(await h.client.run(run).wait(timeout=5))["doubled"] for run in runs] == [0, 2, 4]
    await h.stop_all()
    h.client.close()
