"""Checkpoints cover only acknowledged records, and the commands offset follows them
(the order is written in runtime/worker/checkpoint.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import PartitionCheckpoint, RunStarted
from runtime.log.schemas.serde import Serde
from runtime.worker.batching import TurnBatcher
from runtime.worker.checkpoint import Checkpointer
from runtime.worker.partition import OwnedPartition
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine
from support.memory_harness import SETTINGS, Harness, until

pytestmark = pytest.mark.unit


def waiting_app(started: list[str], gate: asyncio.Event) -> App:
    app = App("checkpoints")

    @app.tool("slow")
    async def slow(n: int) -> int:
        started.append(f"slow {n}")
        await gate.wait()
        return n

    @app.workflow("two-steps")
    async def two_steps(ctx: Context, n: int) -> int:
        first: int = await ctx.tool("slow", n=n)
        second: int = await ctx.tool("slow", n=n + 1)
        return first + second

    return app


async def test_a_checkpoint_waits_for_the_ack_of_what_it_covers() -> None:
    started: list[str] = []
    gate = asyncio.Event()
    h = Harness(waiting_app(started, gate))
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    run = h.client.submit("two-steps", 1).run_id
    await until(lambda: started, what="the first call to start")
    first = await until(h.checkpoints, what="a checkpoint of the started run")
    assert first[-1].active_runs == {run: 0 + 1}  # the run's RunStarted, after the worker's claim at 0
    # The submission (commands offset 0) is covered: committed after the checkpoint, by the
    # commands intake's thread before its next poll (runtime.worker.intake).
    await until(lambda: h.log.group.committed.get(0) == 1, what="the commands offset 1 committed")

    h.log.hold()  # from here nothing the worker appends is acknowledged
    gate.set()
    await until(lambda: h.log.held_count() >= 2, what="the first result and the next call appended")
    events_end = h.log.watermarks(h.settings.events_topic, 0)[1]
    count = len(h.checkpoints())
    # A checkpoint of the held records has begun: it waits for their ack, and writes nothing yet.
    await until(lambda: worker.owned[0].checkpoint_running, what="a checkpoint to begin")
    assert len(h.checkpoints()) == count, "a checkpoint was written while what it covers was held"
    assert all(c.covered_offset <= events_end for c in h.checkpoints())

    h.log.release()
    status = await h.ended(run)
    assert status.status == "completed" and status.result == 3
    latest = await until(
        lambda: [c for c in h.checkpoints() if c.covered_offset > events_end],
        what="a checkpoint past the release",
    )
    end_now = h.log.watermarks(h.settings.events_topic, 0)[1]
    assert latest[-1].covered_offset <= end_now
    await h.stop_all()


async def test_a_checkpoint_lists_the_active_runs_and_drops_the_ended_ones() -> None:
    started: list[str] = []
    gate = asyncio.Event()
    h = Harness(waiting_app(started, gate))
    h.start(checkpoint_interval_s=0)
    waiting = h.client.submit("two-steps", 1).run_id
    await until(lambda: started, what="the first run to wait in its call")
    gate.set()
    await h.ended(waiting)
    gate.clear()
    still = h.client.submit("two-steps", 10).run_id
    await until(lambda: "slow 10" in started, what="the second run to wait in its call")

    def lists_only_the_second() -> Any:
        return [c for c in h.checkpoints() if set(c.active_runs) == {still}]

    latest = await until(lists_only_the_second, what="a checkpoint listing only the active run")
    assert latest[-1].commands_offset == 2
    await h.stop_all()


async def test_an_ended_run_leaves_nothing_behind_once_its_location_is_indexed() -> None:
    """A worker runs millions of runs over its life: once a run's location is in the run index,
    the partition keeps nothing of it but its id in ``known_runs`` (a resubmission starts nothing)."""
    started: list[str] = []
    gate = asyncio.Event()
    gate.set()
    h = Harness(waiting_app(started, gate))
    worker = h.start(checkpoint_interval_s=0)
    runs = [h.client.submit("two-steps", n).run_id for n in range(5)]
    for run in runs:
        await h.ended(run)
    owned = await until(lambda: worker.owned and worker.owned[0], what="the worker to own the partition")
    await until(lambda: not owned.endings, what="the ended runs' locations to be indexed")
    assert set(runs) <= owned.known_runs
    assert not owned.located & set(runs)  # the index holds them: nothing to remember per run
    assert not (owned.first_offsets.keys() | owned.sizes.keys() | owned.records.keys()) & set(runs)
    await h.stop_all()


class NoFeed:
    """Commits nowhere: the test below reads the checkpoint, not the commands offset."""

    def commit(self, partition: int, offset: int) -> None:
        pass


async def test_a_checkpoint_resuming_in_the_turn_its_ack_settled_lists_the_run_started_in_it() -> None:
    # The window the commands intake opened: a checkpoint whose snapshot is taken once the batch
    # holding a RunStarted is already acknowledged does not yield at ``await last_write``, and
    # resumes before the ack's done callbacks (which note the run's first offset) have run.
    app = waiting_app([], asyncio.Event())
    log = MemoryLog(SETTINGS)
    serde = Serde.offline(SETTINGS)
    batcher = TurnBatcher(SETTINGS, serde, log)
    owned = OwnedPartition(0, 1, Stamp(lambda: 0, "w1", 1), 0, set())
    started = RunStarted(
        run_id="r1",
        seq=1,
        occurred_at=0,
        worker="w1",
        epoch=1,
        workflow="two-steps",
        input="1",
        command_offset=0,
    )
    machine = owned.runs["r1"] = RunMachine(app, started, owned.stamp)
    owned.next_command = 1
    batcher.append(owned, [started])
    machine.begin()  # to its first call: a ToolCallScheduled, appended in the same turn
    batcher.append(owned, machine.drain()[0])
    batcher.send()
    await asyncio.sleep(0)  # the acks settle in this turn; their done callbacks run in the next
    assert owned.last_write is not None and owned.last_write.done()
    assert owned.first_offsets == {}, "the test needs the done callbacks not to have run yet"

    async def still_owner(owned: OwnedPartition, offset: int) -> bool:
        return True

    checkpointer = Checkpointer(SETTINGS, serde, log, "w1", 0, still_owner, lambda p, why: None)
    owned.checkpoint_running = True
    await checkpointer.write(owned, NoFeed())
    (record,) = log.records(SETTINGS.checkpoints_topic, 0)[-1:]
    checkpoint = serde.decode(record.value or b"")
    assert isinstance(checkpoint, PartitionCheckpoint)
    assert checkpoint.active_runs == {"r1": 0}
    assert checkpoint.covered_offset == 2


def many_calls_app() -> App:
    app = App("burst")

    @app.tool("noop")
    def noop(i: int) -> int:
        return i

    @app.workflow("many")
    async def many(ctx: Context, n: int) -> int:
        for i in range(n):
            await ctx.tool("noop", i=i)
        return n

    return app


async def test_once_the_runs_a_checkpoint_listed_have_ended_the_next_comes_before_the_interval() -> None:
    # The interval is an hour: only the early rule checkpoints here. A rebuild decodes every run the
    # latest checkpoint lists; after a burst, one still listing the burst's runs costs the burst.
    h = Harness(many_calls_app())
    h.start(checkpoint_interval_s=3600)
    run = h.client.submit("many", 600).run_id  # 1,200 call records: past EARLY_AFTER_RECORDS mid-run
    assert (await h.ended(run, timeout=30)).result == 600
    last_offset = h.log.watermarks(SETTINGS.events_topic, 0)[1] - 1
    checkpoints = await until(
        lambda: c if (c := h.checkpoints()) and not c[-1].active_runs else None,
        what="a checkpoint listing no active run",
    )
    assert any(run in c.active_runs for c in checkpoints[:-1])  # one came mid-run, listing it
    assert checkpoints[-1].covered_offset == last_offset + 1  # then one past its end, in time
    await h.stop_all()
