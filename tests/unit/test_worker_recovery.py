"""No silent loss: a command whose handling fails ends visibly, an undecodable event parks its run.

Failures are injected: a serde that refuses to encode a record type, garbage bytes in the log.
"""

from __future__ import annotations

import asyncio

import pytest

from runtime.errors import RetryableError
from runtime.log.records.events import Record, RunRejected
from runtime.log.schemas.serde import Serde
from runtime.worker.commands import WorkerError
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import SETTINGS, Harness, until

pytestmark = pytest.mark.unit


class RefusingSerde(Serde):
    """Encodes like the offline serde, except that it raises ``error`` for the first ``times``
    records of type ``refuse``."""

    refuse = ""
    error: Exception = RuntimeError("refused")
    times = 1

    def encode(self, record: Record) -> bytes:
        if record.type == self.refuse and self.times > 0:
            self.times -= 1
            raise self.error
        return super().encode(record)


def refusing(refuse: str, error: Exception) -> RefusingSerde:
    serde = RefusingSerde.offline(SETTINGS)
    assert isinstance(serde, RefusingSerde)
    serde.refuse, serde.error = refuse, error
    return serde


def echo_app() -> App:
    app = App("recovery")

    @app.tool("echo")
    def echo(text: str) -> str:
        return text

    @app.workflow("echo")
    async def workflow(ctx: Context, text: str) -> str:
        result: str = await ctx.tool("echo", text=text)
        return result

    @app.workflow("wait")
    async def wait(ctx: Context, text: str) -> str:
        answer: str = await ctx.wait_signal("go")
        return text + answer

    return app


async def test_a_command_whose_handling_raises_ends_as_rejected_with_the_reason() -> None:
    h = Harness(echo_app(), serde=refusing("RunStarted", ValueError("the registry refused RunStarted")))
    h.start()
    bad = h.client.submit("echo", "lost?").run_id
    good = h.client.submit("echo", "next").run_id  # the partition goes on past the failed command
    status = await h.ended(bad)
    assert status.status == "rejected"
    assert status.reason == "handling failed: ValueError: the registry refused RunStarted"
    rejected = [e for e in h.events(bad) if isinstance(e, RunRejected)]
    assert rejected[0].command_offset == 0
    assert (await h.ended(good)).result == "next"
    await h.stop_all()


async def test_a_transient_failure_stops_the_worker_before_the_command_is_committed() -> None:
    h = Harness(echo_app(), serde=refusing("RunStarted", RetryableError("registry unreachable")))
    h.start("w1", checkpoint_interval_s=0)
    run = h.client.submit("echo", "kept").run_id
    with pytest.raises(WorkerError, match="registry unreachable"):
        await asyncio.wait_for(h.task("w1"), 5)
    h.running.clear()
    assert h.status(run).status == "unknown"  # nothing written for it ...
    assert h.log.group.committed.get(0, 0) == 0  # ... and its command not committed past
    h.serde = Serde.offline(SETTINGS)  # the registry is back
    h.start("w2")
    assert (await h.ended(run)).result == "kept"
    await h.stop_all()


async def test_an_undecodable_event_of_an_active_run_parks_it_with_the_reason() -> None:
    h = Harness(echo_app())
    h.start("w1")
    run = h.client.submit("wait", "x").run_id
    await until(lambda: h.types(run) == ["RunStarted"], what="the run to wait for its signal")
    await h.stop("w1")
    # A record of the run that no schema can read (an unknown schema id), as a bad producer leaves.
    garbage = bytes([0, 0, 0, 3, 231]) + b"not avro"
    offset = h.log.append(h.settings.events_topic, 0, run.encode(), garbage).result()
    h.start("w2")
    status = await h.ended(run)
    assert status.status == "parked"
    assert status.reason is not None
    assert f"{h.settings.events_topic}[0]@{offset} cannot be decoded" in status.reason
    h.client.run(run).signal("go", "!")  # a parked run does not go on
    other = h.client.submit("echo", "partition still serves").run_id
    assert (await h.ended(other)).result == "partition still serves"
    assert h.status(run).status == "parked"
    await h.stop_all()
