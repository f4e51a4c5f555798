"""A worker whose group membership is fenced rejoins and carries on; fenced again at once, it stops
and says another worker shares its id.

Kafka fences a static member not only when an impostor joins with its id: librdkafka fences its
own member when the session timed out while the group coordinator moved (the chaos bench's
coordinator row under load), and a worker that only logged the fatal error sat idle forever with
no partitions. The in-memory group models static membership: a member joining with a worker id
already in the group fences the one before.
"""

from __future__ import annotations

import pytest

from runtime.log.port.protocol import MembershipFenced
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def waiting_app() -> App:
    app = App("fenced")

    @app.workflow("wait")
    async def wait(ctx: Context, text: str) -> str:
        answer: str = await ctx.wait_signal("go")
        return text + answer

    return app


async def test_a_fenced_worker_rejoins_claims_again_and_its_waiting_run_completes() -> None:
    h = Harness(waiting_app())
    worker = h.start()
    run = h.client.submit("wait", "a").run_id
    await until(lambda: "RunStarted" in h.types(run), what="the run to start")
    first_feed, first_epoch = worker.feed, worker.owned[0].epoch

    h.log.join("w1", 10_000)  # a member with the worker's id: the worker's membership is fenced

    await until(lambda: worker.feed is not first_feed and 0 in worker.owned, what="the worker to rejoin")
    assert worker.owned[0].epoch > first_epoch  # claimed afresh, as after a restart
    h.client.run(run).signal("go", "b")
    assert (await h.ended(run)).result == "ab"
    assert not h.task().done()
    await h.stop_all()


async def test_fenced_again_soon_after_rejoining_stops_the_worker_naming_the_shared_id() -> None:
    h = Harness(waiting_app())
    worker = h.start()
    await until(lambda: 0 in worker.owned, what="the partition")
    first_feed = worker.feed
    h.log.join("w1", 10_000)
    await until(lambda: worker.feed is not first_feed and 0 in worker.owned, what="the worker to rejoin")

    h.log.join("w1", 10_000)  # and again: two workers share the id

    with pytest.raises(MembershipFenced, match="another worker is running with this worker id"):
        await h.task()
