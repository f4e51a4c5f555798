"""Watching runs and querying them, on the real services with worker subprocesses
(tests/support/stream_apps.py): a watcher sees a model call's first deltas while the call is still
running and every step in order; a worker killed mid-answer shows as the attempt superseded, then
the new attempt's deltas, and a watcher joining after the crash sees only the attempt that counts;
a waiting run's exposed state is queried while it waits; unknown runs and names are refused."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from runtime.client import Client, QueryError, StreamEvent, UnknownRun
from runtime.config import Settings
from runtime.log.kafka.stream import StreamFollower, StreamGap, StreamProducer
from runtime.log.records.stream import decode, encode
from support.model_endpoint import model_endpoint
from support.services import agentlog, make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

APP = "support.stream_apps:app"


class Watcher:
    """``client.stream(run)`` read in a thread of its own, into a list the test polls."""

    def __init__(self, client: Client, run_id: str, since: str = "start") -> None:
        self.events: list[StreamEvent] = []
        self.error: BaseException | None = None
        self._stream = client.stream(run_id, since=since)  # type: ignore[arg-type]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.events.append(event)
        except BaseException as error:  # handed to the test
            self.error = error
        finally:
            self._done.set()

    def first(self, kind: str, position: int | None = None, timeout: float = 30) -> StreamEvent:
        def found() -> StreamEvent | None:
            if self.error is not None:
                raise self.error
            return next(
                (e for e in list(self.events) if e.kind == kind and position in (None, e.position)), None
            )

        return wait_until(found, timeout, f"a {kind} event at {position}")

    def ended(self, timeout: float = 60) -> list[StreamEvent]:
        assert self._done.wait(timeout), f"the stream did not end; it showed {[e.kind for e in self.events]}"
        if self.error is not None:
            raise self.error
        return self.events

    def text(self, position: int) -> str:
        return "".join(
            str(e.data["text"]) for e in self.events if e.kind == "delta" and e.position == position
        )


@pytest.fixture(scope="module")
def world(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Path]]:
    deployment = make_deployment(services, partitions=1)
    where = tmp_path_factory.mktemp("streams")
    yield deployment, where


@pytest.fixture(scope="module")
def worker(world: tuple[Settings, Path]) -> Iterator[list[WorkerProcess]]:
    """The module's worker, in a list: the crash test replaces it with another of the same id."""
    deployment, where = world
    workers = [WorkerProcess(deployment, APP, "w1", where / "w1.log", TEST_STREAM_DIR=str(where))]
    workers[0].wait_ready(1)
    try:
        yield workers
    finally:
        for process in workers:
            if process.proc.poll() is None:
                process.stop()


@pytest.fixture
def client(world: tuple[Settings, Path], worker: list[WorkerProcess]) -> Iterator[Client]:
    with Client(world[0]) as opened:
        yield opened


def _release(where: Path, run_id: str, n: int) -> None:
    (where / f"release-{run_id}-{n}").touch()


def _steps(events: list[StreamEvent]) -> list[tuple[str, int]]:
    return [(e.kind, e.position) for e in events if e.kind not in ("delta",)]


def test_a_watcher_sees_a_model_call_s_deltas_before_it_ends_and_every_step_in_order(
    world: tuple[Settings, Path], client: Client
) -> None:
    where = world[1]
    run = client.submit("talk", {"sync": True}).run_id
    watcher = Watcher(client, run)
    first = watcher.first("delta", 1)
    assert first.data["text"] == "first " and first.attempt == 1
    # The call has not ended: the model waits for its release, and the log has no outcome for it.
    assert not any(e.kind == "completed" for e in watcher.events)
    assert "ModelCallCompleted" not in [e["type"] for e in client.run(run).history()]
    current, now = Watcher(client, run, "current"), Watcher(client, run, "now")
    wait_until(lambda: current.text(1) == "first try ", 30, "the current step's deltas so far")
    _release(where, run, 1)
    watcher.first("delta", 3)  # the sync adapter's deltas come from a pool thread
    _release(where, run, 2)
    events = watcher.ended()
    assert _steps(events) == [
        ("started", 1),
        ("attempt", 1),
        ("completed", 1),
        ("started", 2),
        ("attempt", 2),
        ("completed", 2),
        ("started", 3),
        ("attempt", 3),
        ("completed", 3),
        ("ended", -1),
    ]
    result = client.run(run).result()
    assert watcher.text(1) == result["said"] == f"first try of {run}"
    assert watcher.text(3) == result["again"] == f"fresh answer for {run}"
    # "current": the step in progress (its start from the history, its deltas so far), then on;
    # "now": only what came after it joined.
    assert _steps(current.ended())[:2] == [("started", 1), ("attempt", 1)]
    assert current.text(1) == watcher.text(1) and current.text(3) == watcher.text(3)
    now_steps = _steps(now.ended())
    assert ("started", 1) not in now_steps and ("attempt", 1) not in now_steps
    assert now_steps[-1] == ("ended", -1) and now.text(1) == f"of {run}"
    # A watcher of the ended run gets its history: the same steps, no deltas (the results say it all).
    late = list(client.stream(run))
    assert _steps(late) == [s for s in _steps(events) if s[0] != "attempt"]
    assert not [e for e in late if e.kind == "delta"]


def test_a_worker_killed_mid_answer_shows_the_attempt_superseded_and_a_late_watcher_no_duplicate(
    world: tuple[Settings, Path], client: Client, worker: list[WorkerProcess]
) -> None:
    deployment, where = world
    run = client.submit("talk", {}).run_id
    watcher = Watcher(client, run)
    assert watcher.first("delta", 1).data["text"] == "first "
    worker[0].kill()
    worker.pop().stop()  # its log and reader closed
    # The same worker id rejoins at once (static membership) and runs the call again, in doubt.
    worker.append(WorkerProcess(deployment, APP, "w1", where / "w1-again.log", TEST_STREAM_DIR=str(where)))
    marker = watcher.first("superseded", 1)
    assert marker.attempt == 1 and marker.data["by"] == 2
    wait_until(lambda: "fresh answer " in watcher.text(1), 30, "the new attempt's deltas")
    after = watcher.events[watcher.events.index(marker) :]
    assert [(e.attempt, e.data["text"]) for e in after if e.kind == "delta"] == [
        (2, "fresh "),
        (2, "answer "),
    ]
    # A watcher joining now, after the crash, mid-answer: the new attempt only, each step once.
    late = Watcher(client, run)
    wait_until(lambda: late.text(1) == "fresh answer ", 30, "the late watcher to see the new attempt")
    _release(where, run, 2)
    events, late_events = watcher.ended(), late.ended()
    result = client.run(run).result()
    assert result["said"] == f"fresh answer for {run}"
    assert late.text(1) == result["said"]
    assert not [e for e in late_events if e.kind == "superseded"]
    assert [e.attempt for e in late_events if e.kind == "attempt"] == [2, 1]  # the call's, the tool's
    late_steps = _steps(late_events)
    assert len(late_steps) == len(set(late_steps)), late_steps
    assert watcher.text(1) == "first try fresh answer for " + run  # the first watcher saw both, marked
    assert events[-1].kind == "ended"


def test_a_waiting_run_s_exposed_state_is_queried_while_it_waits(
    world: tuple[Settings, Path], client: Client
) -> None:
    deployment = world[0]
    run = client.submit("progress", {}).run_id
    assert wait_until(
        lambda: _query_or_none(client, run, "progress") == {"step": 2, "of": 2}, 30, "the exposed progress"
    )
    assert client.query(run, "phase") == "waiting for go"
    assert client.run(run).status().status == "running"  # it still waits: nothing signalled it
    with pytest.raises(QueryError, match=r"exposes no 'cost'; it exposes: phase, progress"):
        client.query(run, "cost")
    cli = agentlog(deployment, "query", run, "progress")
    assert cli.returncode == 0 and json.loads(cli.stdout) == {"step": 2, "of": 2}, cli.stderr
    client.run(run).signal("go", "now")
    assert client.run(run).result() == {"went": "now"}

    async def kinds() -> list[str]:
        return [event.kind async for event in client.astream(run)]

    assert asyncio.run(kinds())[-2:] == ["signal", "ended"]
    watched = agentlog(deployment, "watch", run)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.splitlines()[-1] == 'run completed: {"went":"now"}'
    assert "[2] waiting for signal 'go'" in watched.stdout


def test_a_watcher_is_told_of_a_permit_wait_and_of_a_signal_wait_with_no_record(
    world: tuple[Settings, Path], client: Client
) -> None:
    """``parks`` calls a tool one run at a time (a concurrency limit of one), then waits for ``go``
    with no timeout: the second run's watcher sees it wait for the permit (its record), then each
    run's watcher sees it wait for the signal, which no record stands for."""
    where = world[1]
    holder = client.submit("parks", {}).run_id
    first = Watcher(client, holder)
    first.first("started", 1)  # it holds the permit, its tool waits for its release
    queued = client.submit("parks", {}).run_id
    second = Watcher(client, queued)
    permit = second.first("waiting", 1)
    assert permit.data == {"for": "permit", "name": "one_at_a_time", "until": None}
    for run, watcher in ((holder, first), (queued, second)):
        (where / f"release-{run}-held").touch()
        parked = watcher.first("waiting", 2)
        assert parked.data == {"for": "signal", "name": "go", "until": None}
        assert parked.live  # published by the worker: the history holds no record of this wait
    for run in (holder, queued):
        client.run(run).signal("go", run)
        assert client.run(run).result() == {"went": run}
    for watcher in (first, second):
        steps = [(e.kind, e.position) for e in watcher.ended()]
        assert steps.count(("waiting", 2)) == 1 and steps[-2:] == [("signal", -1), ("ended", -1)], steps


def test_unknown_runs_are_refused_at_once(world: tuple[Settings, Path], client: Client) -> None:
    deployment = world[0]
    with pytest.raises(UnknownRun, match="unknown run 'no-such-run'"):
        client.stream("no-such-run")
    with pytest.raises(UnknownRun, match="unknown run 'no-such-run'"):
        client.query("no-such-run", "progress")
    for command in (("watch", "no-such-run"), ("query", "no-such-run", "progress")):
        done = agentlog(deployment, *command)
        assert done.returncode != 0 and "unknown run 'no-such-run'" in done.stderr, done


def _query_or_none(client: Client, run: str, name: str) -> object:
    try:
        return client.query(run, name)
    except QueryError:
        return None


def test_a_reader_is_told_when_retention_dropped_what_it_had_not_read(world: tuple[Settings, Path]) -> None:
    deployment = world[0]
    producer = StreamProducer(deployment)
    topic = deployment.stream_topic
    follower = StreamFollower(deployment, topic, 0)
    admin = AdminClient(deployment.kafka_common())
    try:
        high = follower.bounds()[1]
        for i in range(6):
            event = StreamEvent("retained", "delta", 1, 1, {"kind": "text", "text": str(i), "index": 0}, 0, 0)
            producer.publish(topic, 0, b"retained", encode(event))
        producer.flush()
        # Retention deletes the first four (delete_records does what retention does) before a
        # reader behind by six reads them.
        done = admin.delete_records([TopicPartition(topic, 0, high + 4)], request_timeout=30)
        for future in done.values():
            future.result()
        follower.start(high)
        with pytest.raises(StreamGap) as gap:
            wait_until(lambda: follower.poll(0.2), 30, "the gap")
        assert (gap.value.wanted, gap.value.first_held) == (high, high + 4)
        rest = wait_until(lambda: follower.poll(0.2), 30, "the records still held")
        assert [decode(r.value or b"").data["text"] for r in rest] == ["4", "5"]
    finally:
        follower.close()
        producer.flush()


def test_with_streams_off_a_watcher_still_sees_each_step_from_the_log(
    services: Settings, world: tuple[Settings, Path]
) -> None:
    deployment, where = make_deployment(services, partitions=1), world[1]
    worker = WorkerProcess(
        deployment, APP, "off", where / "off.log", TEST_STREAM_DIR=str(where), AGENTLOG_STREAM_RUNS="false"
    )
    try:
        worker.wait_ready(1)
        with Client(deployment) as client:
            run = client.submit("talk", {}, run_id=f"off-{uuid.uuid4().hex[:8]}").run_id
            watcher = Watcher(client, run)
            watcher.first("started", 1)
            _release(where, run, 1)
            events = watcher.ended()
            assert _steps(events) == [
                ("started", 1),
                ("completed", 1),
                ("started", 2),
                ("completed", 2),
                ("ended", -1),
            ]
            assert not [e for e in events if e.live]  # every one read from the events topic
            with pytest.raises(QueryError, match="has exposed nothing"):
                client.query(run, "progress")
    finally:
        worker.stop()


def test_the_openai_adapter_streams_to_the_caller_before_the_provider_has_finished(
    services: Settings, world: tuple[Settings, Path]
) -> None:
    """The real adapter (runtime.models.openai, streaming because a sink is set) against the tests'
    own OpenAI-compatible server, which sends its answer a word every 0.3 s."""
    deployment, where = make_deployment(services, partitions=1), world[1]
    with model_endpoint() as endpoint:
        endpoint.pause_s = 0.3
        worker = WorkerProcess(
            deployment,
            "support.endpoint_app:app",
            "openai",
            where / "openai.log",
            TEST_MODEL_URL=endpoint.url,
        )
        try:
            worker.wait_ready(1)
            with Client(deployment) as client:
                run = client.submit("ask", {"order": "A-1", "text": "refund?"}).run_id
                watcher = Watcher(client, run)
                watcher.first("delta", 1)
                request = endpoint.requests[-1]
                assert request["body"]["stream"] is True
                assert "events" not in request, "the provider had sent its whole answer already"
                events = watcher.ended()
                assert watcher.text(1) == client.run(run).result() == "refund 41.60"
                assert _steps(events) == [("started", 1), ("attempt", 1), ("completed", 1), ("ended", -1)]
        finally:
            worker.stop()
