"""Heartbeats (runtime.worker.heartbeats): the throttle, one attempt's records, the tool's view of
them, replay with heartbeat records anywhere in a history, and a silent tool retried early -- on
the in-memory log (the Kafka and kill -9 side: tests/chaos/test_heartbeat_crash.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from runtime import App, Context, Settings, heartbeat, last_heartbeat
from runtime.errors import AgentlogError
from runtime.log.records.events import (
    Event,
    RunStarted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallHeartbeat,
    ToolCallScheduled,
)
from runtime.replay.replayer import Replayer
from runtime.run_status import LoggedEvent, summarize
from runtime.worker.heartbeats import CallBeats, HeartbeatTimeout, Throttle
from runtime.workflow.app import RegistrationError, RetryPolicy
from runtime.workflow.intents import Intent, Stamp
from runtime.workflow.machine import RunMachine
from support.machine_driver import drive
from support.memory_worker import serving

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------- the throttle
def test_the_throttle_writes_the_first_at_once_then_once_per_interval() -> None:
    throttle = Throttle(1.0)
    assert throttle.delay(100.0) == 0.0  # nothing written yet: at once
    throttle.wrote(100.0)
    assert throttle.delay(100.25) == pytest.approx(0.75)  # within the interval: at its end
    assert throttle.delay(100.999) == pytest.approx(0.001)
    assert throttle.delay(101.0) == 0.0
    assert throttle.delay(250.0) == 0.0  # long after: at once again
    throttle.wrote(250.0)
    assert throttle.delay(250.5) == pytest.approx(0.5)


def _beats(
    loop: asyncio.AbstractEventLoop, records: list[ToolCallHeartbeat], prior: str | None = None, **kw: Any
) -> CallBeats:
    return CallBeats(loop, "bulk", 3, 2, prior, records.append, lambda: 1_700_000_000_000, **kw)


def test_a_tight_loop_of_beats_writes_the_first_and_the_last_only() -> None:
    """1000 beats within one interval: the first is recorded at once, the others coalesce into the
    latest, which the attempt's end writes (before its outcome would be)."""
    records: list[ToolCallHeartbeat] = []

    async def attempt() -> None:
        beats = _beats(asyncio.get_running_loop(), records)
        for i in range(1, 1001):
            beats.beat({"done": i})
        assert [r.details for r in records] == ['{"done":1}']
        beats.close()

    asyncio.run(attempt())
    assert [(r.position, r.attempt, r.details) for r in records] == [
        (3, 2, '{"done":1}'),
        (3, 2, '{"done":1000}'),
    ]
    assert all(r.beat_at == 1_700_000_000_000 for r in records)


def test_beats_after_the_interval_are_written_at_its_end_from_a_tool_thread() -> None:
    """A sync tool beats from a pool thread: each interval writes the latest details once; nothing is
    written twice, and the attempt's end writes nothing when all is recorded."""
    records: list[ToolCallHeartbeat] = []

    async def attempt() -> None:
        loop = asyncio.get_running_loop()
        beats = _beats(loop, records, interval=0.05)

        def tool() -> None:
            for i in range(1, 4):
                beats.beat({"done": i})
                time.sleep(0.12)  # past the interval: each beat gets its own record

        await loop.run_in_executor(None, tool)
        await asyncio.sleep(0.1)
        beats.close()

    asyncio.run(attempt())
    assert [r.details for r in records] == ['{"done":1}', '{"done":2}', '{"done":3}']


def test_last_heartbeat_is_this_attempts_latest_else_the_earlier_attempts() -> None:
    records: list[ToolCallHeartbeat] = []

    async def attempt() -> None:
        beats = _beats(asyncio.get_running_loop(), records, prior='{"done":7}')
        assert beats.last() == {"done": 7}
        beats.beat({"done": 8})
        assert beats.last() == {"done": 8}
        beats.close()
        beats.beat({"done": 9})  # a given-up attempt's thread beats on: ignored
        assert beats.last() == {"done": 8}

    asyncio.run(attempt())
    assert [r.details for r in records] == ['{"done":8}']


def test_details_must_be_json_and_small() -> None:
    async def attempt() -> None:
        beats = _beats(asyncio.get_running_loop(), [])
        with pytest.raises(TypeError, match="heartbeat details of tool 'bulk' must be JSON"):
            beats.beat({"at": object()})
        with pytest.raises(ValueError, match="over 16384: report progress"):
            beats.beat({"blob": "x" * 20_000})
        beats.close()

    asyncio.run(attempt())


def test_heartbeat_outside_a_tool_call_says_so() -> None:
    with pytest.raises(AgentlogError, match=r"heartbeat\(\) is called outside a tool call"):
        heartbeat({"done": 1})
    with pytest.raises(AgentlogError, match=r"last_heartbeat\(\) is called outside a tool call"):
        last_heartbeat()


def test_a_silent_call_fails_with_heartbeat_timeout_and_a_beating_one_does_not() -> None:
    async def attempt(beat_every: float | None) -> str:
        beats = _beats(asyncio.get_running_loop(), [], timeout=0.2)

        async def tool() -> str:
            for _ in range(8):  # 0.4 s in all, twice the heartbeat timeout
                if beat_every is not None:
                    heartbeat("alive")
                await asyncio.sleep(0.05)
            return "done"

        return await beats.watched(beats.bound(tool, True)())

    assert asyncio.run(attempt(beat_every=0.05)) == "done"
    with pytest.raises(HeartbeatTimeout, match=r"tool 'bulk' sent no heartbeat for 0\.2 s"):
        asyncio.run(attempt(beat_every=None))


# ---------------------------------------------------------------------------- declaration
def test_heartbeat_timeout_must_be_positive_and_shorter_than_the_timeout() -> None:
    app = App("t")

    def tool() -> None: ...

    app.tool("ok", heartbeat_timeout=2, retry=RetryPolicy(timeout=60))(tool)
    assert app.tools["ok"].heartbeat_timeout == 2
    app.tool("no_timeout", heartbeat_timeout=5, retry=RetryPolicy(timeout=None))(tool)
    with pytest.raises(RegistrationError, match="heartbeat_timeout must be seconds > 0, got 0"):
        app.tool("zero", heartbeat_timeout=0)(tool)
    with pytest.raises(RegistrationError, match="not shorter than its retry timeout of 120 s"):
        app.tool("long", heartbeat_timeout=120)(tool)


# ---------------------------------------------------------------------------- replay
def _app() -> App:
    app = App("t")

    @app.tool("bulk")
    def bulk(items: int) -> int:
        return items

    @app.tool("other")
    def other(n: int) -> int:
        return n

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        a, b = await ctx.gather(ctx.tool("bulk", items=3), ctx.tool("other", n=1))
        c = await ctx.tool("bulk", items=4)
        return [a, b, c, ctx.now().timestamp(), ctx.uuid().hex]

    return app


def _started() -> RunStarted:
    return RunStarted(run_id="r1", seq=1, occurred_at=5, workflow="wf", input="{}", command_offset=0)


def _live(crash_after: int | None = None) -> list[Event]:
    ticks = iter(range(1000, 10_000, 7))
    machine = RunMachine(_app(), _started(), Stamp(lambda: next(ticks), "w1", 0))
    machine.begin()

    def answer(intent: Intent) -> Event:
        return ToolCallCompleted(run_id="r1", position=intent.position, result=json.dumps(intent.args))

    return drive(machine, answer, [_started()], crash_after)


def _with_heartbeats(history: list[Event]) -> list[Event]:
    """A heartbeat of every call scheduled so far after each record: wherever they fall, even after
    the call's outcome (a pending one is written as its attempt ends)."""
    out: list[Event] = []
    scheduled: list[int] = []
    for event in history:
        out.append(event)
        if isinstance(event, ToolCallScheduled):
            scheduled.append(event.position)
        for position in scheduled:
            out.append(
                ToolCallHeartbeat(
                    run_id="r1", position=position, details=json.dumps({"p": position, "after": event.seq})
                )
            )
    return out


def test_replay_accepts_heartbeats_anywhere_and_they_decide_nothing() -> None:
    plain = _live()
    beating = _with_heartbeats(plain)
    assert len(beating) > len(plain) + 5
    without = Replayer(app=_app()).replay(plain)
    with_them = Replayer(app=_app()).replay(beating)
    assert with_them.ok and with_them.status == "completed"
    # ctx.now() and ctx.uuid() too: a heartbeat resumes nothing, so the clock the code saw is the same
    assert with_them.result == without.result


def test_a_call_in_flight_at_a_crash_is_retried_with_its_last_recorded_details() -> None:
    history = _live(crash_after=2)  # both gathered calls answered; the second bulk call in flight
    assert isinstance(history[-1], ToolCallScheduled)
    in_flight = history[-1].position
    history += [
        ToolCallHeartbeat(run_id="r1", position=in_flight, attempt=1, details='{"done":1}'),
        ToolCallFailed(
            run_id="r1", position=in_flight, error_type="HeartbeatTimeout", error="silent", final=False
        ),
        ToolCallHeartbeat(run_id="r1", position=in_flight, attempt=2, details='{"done":2}'),
    ]
    machine = RunMachine(_app(), _started(), Stamp(lambda: 9_999, "w2", 7))
    machine.begin(history)
    machine.replay(history)
    machine.finish_replay()
    events, ready = machine.drain()
    assert events == []
    (retry,) = ready
    assert (retry.position, retry.in_doubt, retry.failed_attempts) == (in_flight, True, 1)
    assert retry.heartbeat == '{"done":2}'  # what the worker's next attempt reads (last_heartbeat)


def test_status_shows_the_last_heartbeat_of_a_call_in_flight_until_it_ends() -> None:
    scheduled = ToolCallScheduled(run_id="r", position=1, tool="bulk", args_hash="h", args="{}")
    beats = [
        ToolCallHeartbeat(run_id="r", position=1, details='{"done":1}', beat_at=1_000, occurred_at=1_100),
        ToolCallHeartbeat(run_id="r", position=1, details='{"done":5}', beat_at=4_000, occurred_at=4_200),
    ]
    started = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0)

    def logged(*events: Event) -> list[LoggedEvent]:
        return [LoggedEvent(i, 10, e) for i, e in enumerate(events)]

    (beat,) = summarize("r", logged(started, scheduled, *beats)).heartbeats
    assert (beat.name, beat.position, beat.attempt, beat.details, beat.beat_at) == (
        "bulk",
        1,
        1,
        {"done": 5},
        4_000,
    )
    assert beat.describe(7_500) == "tool 'bulk' at position 1: {\"done\":5} (3 s ago, attempt 1)"
    assert summarize("r", logged(started, scheduled, *beats)).as_dict()["heartbeats"][0]["details"] == {
        "done": 5
    }
    done = ToolCallCompleted(run_id="r", position=1, result="1")
    assert summarize("r", logged(started, scheduled, *beats, done)).heartbeats == ()


# ---------------------------------------------------------------------------- a worker
def test_a_silent_tool_is_retried_after_its_heartbeat_timeout_and_reads_its_details() -> None:
    """On the in-memory log with a real worker: the first attempt reports where it is and then hangs;
    it fails as HeartbeatTimeout long before its 30 s timeout, and the retry reads its details."""
    app = App("t")
    seen: list[Any] = []
    release = threading.Event()

    @app.tool("bulk", heartbeat_timeout=0.3, retry=RetryPolicy(timeout=30, initial_backoff=0.01))
    def bulk(items: int) -> dict[str, Any]:
        seen.append(last_heartbeat())
        if last_heartbeat() is None:
            heartbeat({"done": 2})
            release.wait(20)  # hangs, silent (released at the test's end so no thread lingers)
        return {"resumed_from": last_heartbeat()}

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.tool("bulk", items=5)

    try:
        with serving(app, Settings(partitions=1)) as (client, _):
            run = client.submit("wf", {})
            assert run.result(timeout=20) == {"resumed_from": {"done": 2}}
            events = [logged.event for logged in run.events()]
    finally:
        release.set()
    assert seen == [None, {"done": 2}]
    failure = next(e for e in events if isinstance(e, ToolCallFailed))
    assert (failure.error_type, failure.attempt, failure.final) == ("HeartbeatTimeout", 1, False)
    assert "sent no heartbeat for 0.3 s" in failure.error
    beats = [(e.attempt, e.details) for e in events if isinstance(e, ToolCallHeartbeat)]
    assert beats == [(1, '{"done":2}')]
