"""A run's handle (runtime.client.RunHandle) on the in-memory log: the commands it writes, and
what it reads and waits for through the real worker."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import RunHandle
from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.memory import MemoryLog
from runtime.log.port.partitioning import partition_for
from runtime.log.records.events import CancelRequested, Command, RunSubmitted, SignalSent
from runtime.log.schemas.serde import Serde
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness

pytestmark = pytest.mark.unit

SETTINGS = Settings(partitions=4)


def _client() -> tuple[Client, MemoryLog]:
    log = MemoryLog(SETTINGS)
    return Client(SETTINGS, identity="test", log=log, serde=Serde.offline(SETTINGS)), log


def _commands(client: Client, log: MemoryLog, run_id: str) -> list[Command]:
    partition = partition_for(run_id, SETTINGS.partitions)
    decoded = [
        client.serde.decode(r.value or b"", r.key) for r in log.read(SETTINGS.commands_topic, partition)
    ]
    return [c for c in decoded if isinstance(c, Command) and c.run_id == run_id]


def test_a_submission_returns_the_handle_of_the_run_it_wrote() -> None:
    client, log = _client()
    run = client.submit("echo", {"text": "hi"}, run_id="run-1")
    assert isinstance(run, RunHandle) and run.run_id == "run-1" and repr(run) == "RunHandle('run-1')"
    client.flush()
    [submitted] = _commands(client, log, "run-1")
    assert isinstance(submitted, RunSubmitted) and submitted.input == '{"text":"hi"}'
    assert submitted.worker == "test"
    drawn = client.submit("echo", {})
    assert len(drawn.run_id) == 20 and drawn.run_id != "run-1"


def test_a_handle_signals_and_cancels_its_run_as_commands_of_its_id() -> None:
    client, log = _client()
    run = client.run("run-2")  # a run this client did not submit: nothing is read to make the handle
    assert run.partition == partition_for("run-2", SETTINGS.partitions)
    run.signal("approval", {"ok": True})
    run.cancel()
    run.cancel("changed my mind")
    signal, cancelled, again = _commands(client, log, "run-2")
    assert isinstance(signal, SignalSent) and (signal.name, signal.payload) == ("approval", '{"ok":true}')
    assert isinstance(cancelled, CancelRequested) and cancelled.reason == "cancelled by request"
    assert isinstance(again, CancelRequested) and again.reason == "changed my mind"


def test_a_reserved_signal_name_is_refused_and_nothing_is_written() -> None:
    client, log = _client()
    with pytest.raises(AgentlogError, match="reserved"):
        client.run("run-3").signal("agentlog:compensate", {})
    assert _commands(client, log, "run-3") == []


def _app() -> App:
    app = App("handles")

    @app.tool("double")
    def double(n: int) -> int:
        return 2 * n

    @app.workflow("double")
    async def doubled(ctx: Context, n: int) -> dict[str, Any]:
        return {"n": await ctx.tool("double", n=n)}

    @app.workflow("waits")
    async def waits(ctx: Context, _: Any) -> Any:
        return await ctx.wait_signal("go")

    return app


async def test_a_handle_waits_for_reads_and_forks_its_run() -> None:
    h = Harness(_app())
    h.start()
    try:
        run = h.client.submit("double", 21)
        assert await run.wait(timeout=5) == {"n": 42}
        assert h.client.run(run.run_id).result(timeout=5) == {"n": 42}  # the same run, by id
        status = run.status()
        assert status.status == "completed" and status.run_id == run.run_id
        assert [e["type"] for e in run.history()][-1] == "RunCompleted"
        assert [logged.event.type for logged in run.events()] == [e["type"] for e in run.history()]
        fork = run.fork(1)
        assert isinstance(fork, RunHandle) and fork.run_id != run.run_id
        assert await fork.wait(timeout=5) == {"n": 42}
        forked_from = fork.status().forked_from
        assert forked_from is not None and forked_from.run_id == run.run_id
    finally:
        await h.stop_all()
        h.client.close()


async def test_a_cancelled_runs_result_raises_with_its_status() -> None:
    h = Harness(_app())
    h.start()
    try:
        run = h.client.submit("waits", None)
        run.cancel("no longer needed")
        with pytest.raises(RunError) as raised:
            await run.wait(timeout=5)
        assert raised.value.status == "cancelled" and raised.value.run_id == run.run_id
    finally:
        await h.stop_all()
        h.client.close()
