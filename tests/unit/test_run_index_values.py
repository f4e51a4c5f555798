"""The run index's values: old entries (b"1") stay "seen, not located", and the owner's
checkpoint writes a run's RunStarted and ending offsets (runtime.log.records.run_index)."""

from __future__ import annotations

import pytest

from runtime.log.records.events import TERMINAL_TYPES, RunStarted
from runtime.log.records.run_index import RunLocation, parse_location, run_key
from runtime.worker.rebuild import latest_checkpoint
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def test_index_values_parse_and_the_old_form_locates_nothing() -> None:
    assert parse_location(b"1") is None
    assert parse_location(b"@12") == RunLocation(12)
    assert parse_location(b"@12:40") == RunLocation(12, 40)
    assert parse_location(b"@x:40") is None
    for location in (RunLocation(7), RunLocation(7, 9)):
        assert parse_location(location.encode()) == location


def counting_app() -> App:
    app = App("run-index")

    @app.tool("add")
    async def add(n: int) -> int:
        return n + 1

    @app.workflow("twice")
    async def twice(ctx: Context, n: int) -> int:
        first: int = await ctx.tool("add", n=n)
        second: int = await ctx.tool("add", n=first)
        return second

    return app


async def test_a_checkpoint_locates_an_ended_runs_start_and_ending_and_rebuilds_still_see_it() -> None:
    h = Harness(counting_app())
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    run = h.client.submit("twice", 1).run_id
    await h.ended(run)
    location = await until(
        lambda: (found := h.client.run(run).location()) is not None and found.end is not None and found,
        what="the run's ending located in the index",
    )
    logged = list(h.client.run(run).events())
    started = next(e.offset for e in logged if isinstance(e.event, RunStarted))
    ending = next(e.offset for e in logged if isinstance(e.event, TERMINAL_TYPES))
    assert location == RunLocation(started, ending)
    values = [r.value for r in h.log.read(h.settings.checkpoints_topic, 0, keep=lambda k: k == run_key(run))]
    # The first value knows the run from its start: "seen" once the RunStarted is acknowledged, or,
    # when a checkpoint (interval 0) gets there first on a busy machine, already its location.
    assert values[0] in (b"1", b"@%d" % started), values
    assert run in latest_checkpoint(h.settings, h.serde, h.log, 0).known_runs
    assert h.client.run(run).result(timeout=5) == 3
    await h.stop_all()
