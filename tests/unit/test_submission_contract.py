"""What a producer that is not agentlog's own may get wrong, on the in-memory log: no key, a key
that is not text, the wrong partition (docs/producers.md is the contract)."""

from __future__ import annotations

import time

import pytest

import runtime.worker.commands as commands_module
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for
from runtime.log.records.events import RunRejected, RunStarted, RunSubmitted
from runtime.worker.commands import WorkerError, keyless_run_id
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit

PARTITIONS = 4


def echo_app() -> App:
    app = App("contract")

    @app.tool("shout")
    def shout(text: str) -> str:
        return text.upper()

    @app.workflow("echo")
    async def echo(ctx: Context, request: dict[str, str]) -> str:
        result: str = await ctx.tool("shout", text=request["text"])
        return result

    return app


def harness() -> Harness:
    return Harness(echo_app(), settings=Settings(partitions=PARTITIONS))


def submission(h: Harness, text: str) -> bytes:
    command = RunSubmitted(
        run_id="", workflow="echo", input=f'{{"text": "{text}"}}', occurred_at=int(time.time() * 1000)
    )
    return h.serde.encode(command)


def produce(h: Harness, partition: int, key: bytes | None, value: bytes) -> int:
    return h.log.append(h.settings.commands_topic, partition, key, value).result(timeout=5)


def rejections(h: Harness, partition: int) -> list[RunRejected]:
    found: list[RunRejected] = []
    for record in h.log.read(h.settings.events_topic, partition):
        event = h.serde.decode(record.value or b"", record.key)
        if isinstance(event, RunRejected):
            found.append(event)
    return found


def starts(h: Harness, partition: int) -> list[str]:
    return [
        event.run_id
        for record in h.log.read(h.settings.events_topic, partition)
        if isinstance(event := h.serde.decode(record.value or b"", record.key), RunStarted)
    ]


async def test_a_keyless_submission_is_rejected_with_the_reason_every_time() -> None:
    h = harness()
    h.start()
    first = produce(h, 1, None, submission(h, "a"))
    second = produce(h, 1, None, submission(h, "b"))
    empty = produce(h, 1, b"", submission(h, "c"))
    keyed = h.client.submit("echo", {"text": "after"}).run_id
    assert (await h.ended(keyed)).result == "AFTER", "the partition must go on after keyless commands"
    rejected = await until(lambda: len(r := rejections(h, 1)) == 3 and r, what="three rejections")
    assert [r.run_id for r in rejected] == [keyless_run_id(1, o, PARTITIONS) for o in (first, second, empty)]
    assert all(partition_for(r.run_id, PARTITIONS) == 1 for r in rejected), "found where readers look"
    assert h.status(rejected[0].run_id).status == "rejected"
    for r in rejected:
        assert "has no key" in r.reason and "keyed by its run id" in r.reason, r.reason
    assert all(run for p in range(PARTITIONS) for run in starts(h, p)), "no run with the id '' started"
    await h.stop_all()


async def test_a_key_that_is_not_utf8_is_rejected_naming_it() -> None:
    h = harness()
    h.start()
    key = b"\xff\xfe-run"
    home = partition_for("x", 1)  # any: the command is forwarded to the key's own home first
    produce(h, home, key, submission(h, "a"))
    rejected = await until(
        lambda: [r for p in range(PARTITIONS) for r in rejections(h, p)], what="the rejection"
    )
    assert len(rejected) == 1 and "not UTF-8" in rejected[0].reason, rejected
    await h.stop_all()


async def test_a_submission_on_the_wrong_partition_is_forwarded_home_and_runs_once() -> None:
    h = harness()
    h.start()
    run_id = "go-client-run-1"
    home = partition_for(run_id, PARTITIONS)
    wrong = (home + 1) % PARTITIONS
    produce(h, wrong, run_id.encode(), submission(h, "hello"))
    status = await h.ended(run_id)  # the client reads the home partition, as every reader does
    assert status.status == "completed" and status.result == "HELLO"
    assert starts(h, home) == [run_id]
    assert starts(h, wrong) == [] and rejections(h, wrong) == []
    homes = [r for r in h.log.read(h.settings.commands_topic, home) if r.key == run_id.encode()]
    assert len(homes) == 1, "forwarded exactly once"
    await h.stop_all()


async def test_a_forward_not_acknowledged_stops_the_worker_and_a_restart_forwards_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commands_module, "FORWARD_TIMEOUT_S", 0.2)
    h = harness()
    worker = h.start("w1")
    await until(lambda: worker.owned, what="the worker to own its partitions")
    run_id = "misrouted-run"
    home = partition_for(run_id, PARTITIONS)
    wrong = (home + 1) % PARTITIONS
    produce(h, wrong, run_id.encode(), submission(h, "again"))
    h.log.hold()  # the forward is appended but never acknowledged
    with pytest.raises(AgentlogError) as stopped:
        await h.task("w1")
    # The shutdown's flush meets the same held record and raises too; the stop's cause is kept.
    chain = [stopped.value, stopped.value.__context__]
    assert any(
        isinstance(e, WorkerError) and "could not be forwarded to its home partition" in str(e) for e in chain
    ), chain
    h.running.pop("w1")
    h.log.release()  # the first forward lands after all; the restart forwards a second copy
    h.start("w2")
    status = await h.ended(run_id)
    assert status.status == "completed" and status.result == "AGAIN"
    copies = [r for r in h.log.read(h.settings.commands_topic, home) if r.key == run_id.encode()]
    assert len(copies) == 2, "the restart forwarded the command again"
    assert starts(h, home) == [run_id], "a second forwarded copy starts nothing"
    await h.stop_all()
