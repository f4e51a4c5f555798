"""Run streams without a broker: the seam between a run's history and its stream (what a reader
shows, what it drops, what a backlog compacts to), the stream records, exposed state, and what a
worker on the in-memory log publishes -- live steps and deltas, nothing for a replay."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from runtime.cli.watching import describe
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.streams import LogStreamOut
from runtime.log.records.events import ModelCallCompleted, RunCompleted
from runtime.log.records.stream import StreamEvent, StreamFormatError, decode, encode, from_record
from runtime.models.deltas import Delta, emit
from runtime.stream_seam import Seam, compact, resume_from_ms, unfinished
from runtime.worker.streaming import RunStreams
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from runtime.workflow.exposed import MAX_EXPOSED_BYTES, Exposed
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit

RUN = "r1"


def ev(
    kind: str, position: int = -1, attempt: int = 0, epoch: int = 7, at: int = 0, **data: Any
) -> StreamEvent:
    return StreamEvent(RUN, kind, position, attempt, data, at, epoch)  # type: ignore[arg-type]


def shown(seam: Seam, events: list[StreamEvent]) -> list[tuple[str, int, int]]:
    return [(e.kind, e.position, e.attempt) for x in events for e in seam.admit(x)]


# ---------------------------------------------------------------------------------------------- the seam
def test_what_the_history_holds_is_dropped_from_the_stream_and_the_rest_is_shown_once() -> None:
    history = [ev("started", 1, epoch=-1), ev("completed", 1, 1, epoch=-1), ev("started", 2, epoch=-1)]
    seam = Seam(history)
    stream = [
        ev("started", 1),
        ev("attempt", 1, 1),
        ev("delta", 1, 1, text="a"),  # the call's outcome is in the history: its deltas are moot
        ev("completed", 1, 1),
        ev("started", 2),
        ev("attempt", 2, 1),
        ev("delta", 2, 1, text="b"),
        ev("completed", 2, 1),
        ev("completed", 2, 1),  # a repeat: shown once
        ev("ended", status="completed"),
        ev("delta", 2, 1, text="late"),
    ]
    assert shown(seam, stream) == [("attempt", 2, 1), ("delta", 2, 1), ("completed", 2, 1), ("ended", -1, 0)]
    assert seam.ended


def test_a_reader_joining_after_a_crash_sees_only_the_attempt_that_counts() -> None:
    seam = Seam([ev("started", 1, epoch=-1)])
    backlog = [
        e
        for x in [
            ev("attempt", 1, 1, epoch=3),
            ev("delta", 1, 1, epoch=3, text="first "),
            ev("superseded", 1, 1, epoch=9, by=2),
            ev("attempt", 1, 2, epoch=9),
            ev("delta", 1, 2, epoch=9, text="fresh "),
        ]
        for e in seam.admit(x)
    ]
    assert [(e.kind, e.attempt) for e in backlog] == [
        ("attempt", 1),
        ("delta", 1),
        ("superseded", 1),
        ("attempt", 2),
        ("delta", 2),
    ]  # a live reader sees it all, the marker between
    assert [(e.kind, e.attempt, e.data.get("text")) for e in compact(backlog)] == [
        ("attempt", 2, None),
        ("delta", 2, "fresh "),
    ]


def test_a_second_first_attempt_from_a_newer_worker_gets_a_marker_and_the_older_s_deltas_stop() -> None:
    # The Scheduled record was not durable when its worker died: the next runs the call as a first
    # attempt again and publishes no marker; the reader makes one.
    seam = Seam([])
    out = [
        (e.kind, e.attempt, e.epoch)
        for x in [
            ev("attempt", 1, 1, epoch=3),
            ev("delta", 1, 1, epoch=3),
            ev("attempt", 1, 1, epoch=9),
            ev("delta", 1, 1, epoch=3),  # the old worker's, late (fenced): dropped
            ev("delta", 1, 1, epoch=9),
        ]
        for e in seam.admit(x)
    ]
    assert out == [
        ("attempt", 1, 3),
        ("delta", 1, 3),
        ("superseded", 1, 9),
        ("attempt", 1, 9),
        ("delta", 1, 9),
    ]


def test_an_outcome_only_the_stream_told_of_is_undone_by_a_newer_attempt() -> None:
    seam = Seam([ev("started", 1, epoch=-1)])
    stream = [
        ev("attempt", 1, 1, epoch=3),
        ev("completed", 1, 1, epoch=3),  # its record never became durable: the worker died
        ev("superseded", 1, 1, epoch=9),
        ev("attempt", 1, 2, epoch=9),
        ev("delta", 1, 2, epoch=9),
        ev("completed", 1, 2, epoch=9),
    ]
    kinds = shown(seam, stream)
    assert kinds[-3:] == [("attempt", 1, 2), ("delta", 1, 2), ("completed", 1, 2)]
    assert compact([e for x in stream for e in Seam([]).admit(x)]) == [stream[3], stream[4], stream[5]]


def test_a_final_failure_in_the_history_settles_the_call_and_a_retried_one_does_not() -> None:
    history = [ev("started", 1, epoch=-1), ev("failed", 1, 1, epoch=-1, final=False)]
    seam = Seam(history)
    assert shown(seam, [ev("superseded", 1, 1), ev("attempt", 1, 2), ev("delta", 1, 2)]) == [
        ("superseded", 1, 1),
        ("attempt", 1, 2),
        ("delta", 1, 2),
    ]
    settled = Seam([*history[:1], ev("failed", 1, 1, epoch=-1, final=True)])
    assert shown(settled, [ev("attempt", 1, 2), ev("delta", 1, 2)]) == []


def test_a_retried_attempt_s_failure_stays_in_a_compacted_backlog() -> None:
    backlog = [
        ev("attempt", 1, 1),
        ev("delta", 1, 1),
        ev("failed", 1, 1, final=False),
        ev("superseded", 1, 1),
        ev("attempt", 1, 2),
    ]
    assert [(e.kind, e.attempt) for e in compact(backlog)] == [("failed", 1), ("attempt", 2)]


def test_the_stream_is_read_from_the_earliest_unfinished_step_or_the_history_s_end() -> None:
    history = [
        ev("started", 1, epoch=-1, at=100),
        ev("completed", 1, 1, epoch=-1, at=150),
        ev("started", 2, epoch=-1, at=200),
        ev("started", 3, epoch=-1, at=300),
    ]
    assert resume_from_ms(history, 400) == 200
    assert resume_from_ms(history[:2], 400) == 400
    assert resume_from_ms([], 50) == 50
    waiting = [*history[:2], ev("waiting", 2, epoch=-1, at=160, **{"for": "signal"})]
    assert [(e.kind, e.position) for e in unfinished(history)] == [("started", 2), ("started", 3)]
    assert [(e.kind, e.position) for e in unfinished(waiting)] == [("waiting", 2)]


# --------------------------------------------------------------------------------------- the records
def test_stream_records_round_trip_and_what_is_not_one_is_refused() -> None:
    event = StreamEvent(RUN, "delta", 3, 2, {"kind": "text", "text": "héllo", "index": 0}, 123, 5)
    assert decode(encode(event)) == event
    for value in (b"not json", b'{"k": "delta"}', b'{"r":"x","k":"nope","p":1,"a":1,"d":{},"t":1,"e":1}'):
        with pytest.raises(StreamFormatError):
            decode(value)


def test_a_record_s_contents_stay_out_of_the_stream_when_runs_are_sealed() -> None:
    done = ModelCallCompleted(run_id=RUN, position=1, result='{"text":"secret"}', attempt=2, occurred_at=9)
    assert from_record(done) == StreamEvent(RUN, "completed", 1, 2, {"result": '{"text":"secret"}'}, 9, -1)
    hidden = from_record(done, contents=False, epoch=4)
    assert hidden is not None and hidden.data == {"result": None, "sealed": True} and hidden.live
    ended = from_record(RunCompleted(run_id=RUN, result='"ok"'), contents=False)
    assert ended is not None and ended.data == {"status": "completed", "result": None, "sealed": True}
    # A watcher is told the contents were left out, not shown an empty result.
    assert describe(hidden) == "[1] completed (sealed: seal_contents keeps contents out of the stream)"
    assert describe(ended) == "run completed (sealed: seal_contents keeps contents out of the stream)"
    assert describe(from_record(done, epoch=4)) == '[1] completed: {"text":"secret"}'  # type: ignore[arg-type]


def test_with_sealed_contents_a_worker_streams_no_deltas_and_marks_each_attempt_sealed() -> None:
    out = Collected()
    streams = RunStreams(Settings(partitions=1, seal_contents=True), out)
    intent = Intent(1, "model", "talker", {}, "h", DurableFuture(1))
    assert streams.sink(0, 4, RUN, 1, 1) is None  # no sink: the adapter does not stream
    streams.attempt(0, 4, RUN, intent, 1, "w1")
    (attempt,) = out.stream()
    assert attempt.kind == "attempt" and attempt.data["sealed"] is True
    assert describe(attempt) == "[1] attempt 1 (sealed: its answer is not streamed)"


# ------------------------------------------------------------------------------------ exposed state
def test_exposed_state_is_taken_when_changed_live_and_a_replay_marks_nothing() -> None:
    exposed = Exposed()
    exposed.set("progress", {"step": 1}, live=False)  # a replay: published when it first ran
    assert exposed.take() is None
    exposed.set("progress", {"step": 1})
    assert exposed.take() is None  # the same value: nothing new
    exposed.set("progress", {"step": 2})
    assert exposed.take() == {"progress": '{"step":2}'}
    with pytest.raises(AgentlogError, match="non-empty name"):
        exposed.set("", 1)
    with pytest.raises(TypeError):
        exposed.set("x", object())
    with pytest.raises(AgentlogError, match="over"):
        exposed.set("x", "a" * MAX_EXPOSED_BYTES)


# ------------------------------------------------------------------------ a worker on the memory log
class Collected:
    """A StreamOut that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    def publish(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.records.append((topic, value))

    def publish_many(self, records: Sequence[tuple[str, int, bytes, bytes]]) -> None:
        for topic, partition, key, value in records:
            self.publish(topic, partition, key, value)

    def flush(self, timeout: float = 5.0) -> None:
        pass

    def stream(self) -> list[StreamEvent]:
        return [decode(v) for t, v in self.records if t.endswith("stream")]

    def exposed(self) -> list[bytes]:
        return [v for t, v in self.records if t.endswith("exposed")]


def streaming_app() -> App:
    app = App("streaming-unit")

    @app.model("talker")
    async def talker(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        for word in ("one ", "two"):
            emit(Delta("text", word))
        return {"text": "one two"}

    @app.model("talker_sync")
    def talker_sync(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        emit(Delta("text", "three"))
        return {"text": "three"}

    @app.workflow("chat")
    async def chat(ctx: Context, request: dict[str, Any]) -> Any:
        said = await ctx.model("talker", messages=[{"role": "user", "content": "hi"}])
        again = await ctx.model("talker_sync", messages=[{"role": "user", "content": "hi"}])
        ctx.expose("progress", {"said": said["text"]})
        go = await ctx.wait_signal("go")
        return [said["text"], again["text"], go]

    return app


async def test_a_worker_publishes_live_steps_and_deltas_and_a_takeover_s_replay_nothing() -> None:
    h = Harness(streaming_app())
    first = Collected()
    h.start("w1").executor.stream = RunStreams(h.settings, first)
    run = h.client.submit("chat", {}).run_id
    await until(first.exposed, 5, "the exposed state")
    assert [(e.kind, e.position, e.data.get("text")) for e in first.stream()] == [
        ("started", 1, None),
        ("attempt", 1, None),
        ("delta", 1, "one "),
        ("delta", 1, "two"),
        ("completed", 1, None),
        ("started", 2, None),
        ("attempt", 2, None),
        ("delta", 2, "three"),  # from the sync adapter's pool thread
        ("completed", 2, None),
        ("waiting", 3, None),  # a signal wait with no timeout: no record, told of as the run parks
    ]
    assert first.stream()[-1].data == {"for": "signal", "name": "go", "until": None}
    await h.stop("w1")
    second = Collected()
    h.start("w2").executor.stream = RunStreams(h.settings, second)
    await until(lambda: h.running["w2"][0].owned, 5, "the takeover")
    await asyncio.sleep(0)  # the rebuild's activations run in this turn
    assert second.records == []  # the replay published nothing, the exposed state included
    h.client.run(run).signal("go", "now")
    await h.ended(run)
    assert [(e.kind, e.data.get("status")) for e in second.stream()] == [
        ("signal", None),
        ("ended", "completed"),
    ]
    await h.stop_all()


async def test_a_client_on_the_memory_log_streams_a_run_its_worker_publishes_there() -> None:
    """``Client(log=MemoryLog)`` follows the stream topic through the port (LogFollower); the
    worker publishes to it given ``LogStreamOut``: a call's deltas before it ends, the parked
    wait, the end."""
    app = App("memory-streams")
    released = asyncio.Event()

    @app.model("talker")
    async def talker(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        emit(Delta("text", "one "))
        await released.wait()
        emit(Delta("text", "two"))
        return {"text": "one two"}

    @app.workflow("chat")
    async def chat(ctx: Context, request: dict[str, Any]) -> Any:
        said = await ctx.model("talker", messages=[{"role": "user", "content": "hi"}])
        return [said["text"], await ctx.wait_signal("go")]

    h = Harness(app)
    h.start("w1").executor.stream = RunStreams(h.settings, LogStreamOut(h.log))
    run = h.client.submit("chat", {}).run_id
    events: list[StreamEvent] = []

    async def watch() -> None:
        async for event in h.client.astream(run):
            events.append(event)

    def text() -> str:
        return "".join(str(e.data["text"]) for e in events if e.kind == "delta")

    watching = asyncio.create_task(watch())
    await until(lambda: text() == "one ", 10, "the first delta, while the call is open")
    released.set()
    await until(lambda: any(e.kind == "waiting" for e in events), 10, "the parked wait")
    h.client.run(run).signal("go", "now")
    await asyncio.wait_for(watching, 10)
    await h.stop_all()
    assert text() == "one two"
    assert [(e.kind, e.position) for e in events if e.kind != "delta"] == [
        ("started", 1),
        ("attempt", 1),
        ("completed", 1),
        ("waiting", 2),
        ("signal", -1),
        ("ended", -1),
    ]


async def test_a_retried_attempt_is_marked_superseded_before_the_next_one_starts() -> None:
    app = App("streaming-retry")
    tries: list[int] = []

    @app.model("flaky", retry=RetryPolicy(attempts=3, initial_backoff=0.01))
    async def flaky(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        tries.append(1)
        emit(Delta("text", f"try {len(tries)}"))
        if len(tries) == 1:
            raise ConnectionError("the provider hung up mid-answer")
        return {"text": "try 2"}

    @app.workflow("once")
    async def once(ctx: Context, request: dict[str, Any]) -> Any:
        return await ctx.model("flaky", messages=[{"role": "user", "content": "hi"}])

    h = Harness(app)
    out = Collected()
    h.start("w1").executor.stream = RunStreams(h.settings, out)
    run = h.client.submit("once", {}).run_id
    await h.ended(run)
    await h.stop_all()
    assert [(e.kind, e.attempt, e.data.get("text")) for e in out.stream() if e.position == 1] == [
        ("started", 0, None),
        ("attempt", 1, None),
        ("delta", 1, "try 1"),
        ("failed", 1, None),
        ("superseded", 1, None),
        ("attempt", 2, None),
        ("delta", 2, "try 2"),
        ("completed", 2, None),
    ]
