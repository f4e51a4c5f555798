"""The worker's resource watch (runtime.worker.resources): the watermarks' logic, what readiness and
the log say, a call and a wake that lack a resource, and the operations port's failing accept."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer

import runtime.worker.takeover as takeover_module
from runtime.config import Settings
from runtime.log.records.events import RunParked, ToolCallCompleted, ToolCallFailed
from runtime.ops.server import OpsServer
from runtime.worker.commands import WorkerError
from runtime.worker.health import Readiness
from runtime.worker.resources import Limits, ResourceWatch, Usage, Watermarks, lacking, sample
from runtime.worker.retrying import RetryTrail, after_failure
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit

MARKS = Watermarks(high=0.9, low=0.8)


def _fds(used: int, limit: int | None = 100) -> list[Usage]:
    return [Usage("descriptors", used, limit)]


# ----------------------------------------------------------------------------- the watermarks
@pytest.mark.parametrize(
    ("used", "were_short", "short"),
    [
        (89, False, False),  # under the high mark
        (90, False, True),  # at it
        (85, True, True),  # short, and not yet under the low mark: still short (no flapping)
        (80, True, True),  # at the low mark is not under it
        (79, True, False),  # under it: ready again
        (85, False, False),  # between the marks, coming from below: still fine
    ],
)
def test_a_resource_is_short_from_the_high_mark_until_under_the_low_one(
    used: int, were_short: bool, short: bool
) -> None:
    before = frozenset({"descriptors"}) if were_short else frozenset()
    assert MARKS.short(_fds(used), before) == (frozenset({"descriptors"}) if short else frozenset())


def test_a_resource_without_a_limit_is_never_short() -> None:
    assert MARKS.short(_fds(10**9, None), frozenset()) == frozenset()


def test_each_resource_is_judged_on_its_own() -> None:
    usages = [Usage("descriptors", 95, 100), Usage("threads", 10, 100), Usage("memory", 81, 100)]
    assert MARKS.short(usages, frozenset({"memory"})) == frozenset({"descriptors", "memory"})


def test_a_usage_describes_itself_as_readiness_says_it() -> None:
    assert Usage("descriptors", 235, 256).describe() == "descriptors: 235 of 256 in use"
    assert Usage("memory", 300 << 20, 512 << 20).describe() == "memory: 300 MiB of 512 MiB in use"


def test_low_water_above_high_water_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"resource_low_water.*resource_high_water"):
        Settings(resource_high_water=0.5, resource_low_water=0.7)


# ----------------------------------------------------------------------------- what ran out
@pytest.mark.parametrize(
    ("error", "named"),
    [
        (OSError(errno.EMFILE, "Too many open files"), "descriptors"),
        (OSError(errno.ENFILE, "Too many open files in system"), "descriptors"),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), "memory"),
        (MemoryError(), "memory"),
        (RuntimeError("can't start new thread"), "threads"),
        (OSError(errno.ECONNREFUSED, "Connection refused"), None),
        (ValueError("bad"), None),
    ],
)
def test_an_error_names_the_resource_it_says_ran_out(error: BaseException, named: str | None) -> None:
    assert lacking(error) == named


def test_a_kafka_client_s_error_names_the_resource_by_its_text_only_where_asked() -> None:
    error = Exception("Failed to create consumer: Too many open files")  # librdkafka's, no errno
    assert lacking(error, by_text=True) == "descriptors"
    assert lacking(error) is None  # a call's error quoting a service's lack is not the worker's


def test_a_call_that_lacks_a_resource_is_tried_again_whatever_its_policy() -> None:
    policy = RetryPolicy(attempts=1, non_retryable=(OSError,))
    then = after_failure(policy, OSError(errno.EMFILE, "Too many open files"), 1, RetryTrail(), 10_000, 0.0)
    assert not then.final and "out of descriptors" in then.note
    # An ordinary failure of the same call stays final by its policy.
    assert after_failure(policy, OSError(errno.ECONNREFUSED, "refused"), 1, RetryTrail(), 10_000, 0.0).final


# ----------------------------------------------------------------------------- the watch
def test_the_watch_makes_readiness_name_the_resource_and_logs_one_line_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    readiness = Readiness()
    readiness.assigned()
    samples = iter([_fds(50), _fds(95), _fds(96), _fds(85), _fds(60), _fds(61)])
    watch = ResourceWatch(Settings(), readiness, probe=lambda _limits: next(samples))
    caplog.set_level(logging.INFO, logger="agentlog.worker")
    said: list[list[str]] = []
    for _ in range(6):
        caplog.clear()
        watch.check()
        said.append([json.loads(r.getMessage())["event"] for r in caplog.records])
        if len(said) == 2:
            assert readiness() == "descriptors: 95 of 100 in use"
            assert watch.usages == _fds(95)
    assert said == [[], ["resource_short"], [], [], ["resource_recovered"], []]
    assert readiness() is None


def test_a_loop_that_stops_turning_makes_the_worker_not_ready_until_it_turns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    readiness = Readiness()
    readiness.assigned()
    watch = ResourceWatch(Settings(), readiness, probe=lambda _limits: _fds(10))
    caplog.set_level(logging.INFO, logger="agentlog.worker")
    watch.check()  # before the loop's first turn: nothing to say
    assert readiness() is None
    watch.loop_turned = time.monotonic() - 42
    watch.check()
    watch.check()
    assert readiness() == "event loop: no turn for 42 s"
    watch.loop_turned = time.monotonic()
    watch.check()
    assert readiness() is None
    events = [json.loads(r.getMessage())["event"] for r in caplog.records]
    assert events == ["loop_stalled", "loop_turning_again"]


def test_a_fatal_lack_met_outside_the_loop_is_said_once_and_stops_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = ResourceWatch(Settings(), Readiness(), probe=lambda _limits: [])
    caplog.set_level(logging.INFO, logger="agentlog.worker")
    for _ in range(3):  # the port's accept fails again and again
        watch.fatal(
            "accepting a connection to the operations port", OSError(errno.EMFILE, "Too many open files")
        )
    assert watch.failure == (
        "out of descriptors: accepting a connection to the operations port failed "
        "(OSError: [Errno 24] Too many open files)"
    )
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    assert [(line["event"], line["resource"]) for line in lines] == [
        ("worker_out_of_resource", "descriptors")
    ]


def test_readiness_names_both_the_loop_s_reason_and_the_resource() -> None:
    readiness = Readiness()
    readiness.assigning([0, 3])
    readiness.short_of = "threads: 95 of 100 in use"
    assert readiness() == "claiming and rebuilding partitions [0, 3]; threads: 95 of 100 in use"


def test_the_sample_reads_this_process_s_descriptors_against_its_limits() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    usages = {u.resource: u for u in sample(Limits(max_descriptors=None, max_threads=None, max_memory=None))}
    opened = len(os.listdir("/proc/self/fd")) - 1
    assert abs(usages["descriptors"].used - opened) <= 2 and usages["descriptors"].limit == soft
    assert usages["threads"].used >= 1 and usages["memory"].used > 1 << 20
    lower = {u.resource: u for u in sample(Limits(max_descriptors=7, max_threads=5, max_memory=1 << 20))}
    assert (lower["descriptors"].limit, lower["threads"].limit, lower["memory"].limit) == (7, 5, 1 << 20)


# ----------------------------------------------------------------------------- runs on the in-memory log
app = App("resources")
CALLS: dict[str, int] = {}
FAIL_NEXT: list[BaseException] = []


@app.tool("charge", effect=True)
async def charge(amount: int, idempotency_key: str) -> int:
    CALLS[idempotency_key] = CALLS.get(idempotency_key, 0) + 1
    if FAIL_NEXT:
        raise FAIL_NEXT.pop()
    return amount


@app.workflow("pay")
async def pay(ctx: Context, amount: int) -> int:
    await ctx.wait_signal("go")
    return int(await ctx.tool("charge", amount=amount))


async def test_a_call_out_of_descriptors_stops_the_worker_and_its_successor_makes_it_again() -> None:
    CALLS.clear()
    h = Harness(app)
    h.start("w1")
    try:
        run_id = h.client.submit("pay", 5).run_id
        FAIL_NEXT.append(OSError(errno.EMFILE, "Too many open files"))
        h.client.run(run_id).signal("go", {})
        with pytest.raises(WorkerError, match="out of descriptors: tool 'charge'"):
            await until(lambda: h.task("w1").done() or None, 10, "the worker to stop")
            h.task("w1").result()
        h.running.pop("w1")
        failed = [e for e in h.events(run_id) if isinstance(e, ToolCallFailed)]
        assert len(failed) == 1 and not failed[0].final  # retryable: not the call's verdict
        assert not any(isinstance(e, ToolCallCompleted) for e in h.events(run_id))
        h.start("w2")
        status = await h.ended(run_id)
    finally:
        await h.stop_all()
    assert status.status == "completed" and status.result == 5
    assert list(CALLS.values()) == [2]  # the failed try and the successor's, with one key


async def test_a_command_that_lacks_a_resource_stops_the_worker_with_one_line_and_is_not_rejected(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import runtime.worker.commands as commands_module

    CALLS.clear()
    real_new_run: Callable[..., Any] = commands_module.new_run
    failures = [MemoryError()]

    def new_run(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_new_run(*args, **kwargs)

    monkeypatch.setattr(commands_module, "new_run", new_run)
    caplog.set_level(logging.INFO, logger="agentlog.worker")
    h = Harness(app)
    h.start("w1")
    try:
        run_id = h.client.submit("pay", 3).run_id
        with pytest.raises(WorkerError, match=r"out of memory: command 0@\d+ failed"):
            await until(lambda: h.task("w1").done() or None, 10, "the worker to stop")
            h.task("w1").result()
        h.running.pop("w1")
        said = [r.getMessage() for r in caplog.records if "worker_out_of_resource" in r.getMessage()]
        assert len(said) == 1 and json.loads(said[0])["resource"] == "memory"
        h.start("w2")
        h.client.run(run_id).signal("go", {})
        status = await h.ended(run_id)
    finally:
        await h.stop_all()
    assert status.status == "completed" and status.result == 3
    assert "RunRejected" not in h.types(run_id)


async def test_a_run_that_cannot_be_woken_is_parked_with_why_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    CALLS.clear()
    h = Harness(app)
    h.start("w1")
    try:
        lacking_run, fine_run = h.client.submit("pay", 1).run_id, h.client.submit("pay", 2).run_id
        for run_id in (lacking_run, fine_run):
            await until(lambda r=run_id: h.types(r) == ["RunStarted"] or None, 5, "the runs to wait")
        await h.stop("w1")
        real_new_run: Callable[..., Any] = takeover_module.new_run

        class Unwakeable:
            def activate(self, _activation: Any) -> Any:
                raise OSError(errno.EMFILE, "Too many open files")

            def close(self) -> None:  # the worker lets a run it parks go (RunInstance.close)
                pass

        def new_run(app: App, started: Any, *args: Any, **kwargs: Any) -> Any:
            if started.run_id == lacking_run:
                return Unwakeable()
            return real_new_run(app, started, *args, **kwargs)

        monkeypatch.setattr(takeover_module, "new_run", new_run)
        h.start("w2")
        parked = await h.ended(lacking_run)
        h.client.run(fine_run).signal("go", {})
        fine = await h.ended(fine_run)
    finally:
        await h.stop_all()
    assert parked.status == "parked"
    last = h.events(lacking_run)[-1]
    assert isinstance(last, RunParked) and "out of descriptors when waking it" in last.reason
    assert fine.status == "completed" and fine.result == 2


# ----------------------------------------------------------------------------- the operations port
def test_a_failing_accept_backs_off_and_is_reported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[OSError] = []
    ops = OpsServer(CollectorRegistry(), lambda: None, 0, on_exhausted=told.append)
    server: Any = ops._server
    slept: list[float] = []
    server.sleep = slept.append
    accept: Callable[..., Any] = ThreadingWSGIServer.get_request

    def out_of_descriptors(self: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    try:
        monkeypatch.setattr(ThreadingWSGIServer, "get_request", out_of_descriptors)
        for _ in range(7):
            server._handle_request_noblock()
        assert [e.errno for e in told] == [errno.EMFILE]  # once per outage
        assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # never a spin
        monkeypatch.setattr(ThreadingWSGIServer, "get_request", accept)
        ops.start()
        assert httpx.get(f"http://127.0.0.1:{ops.port}/healthz", timeout=5).status_code == 200
        assert server.failing == 0  # answered again: the next outage is reported again
    finally:
        ops.stop()


def test_a_probe_is_answered_when_no_thread_can_be_started(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = OpsServer(CollectorRegistry(), lambda: "descriptors: 95 of 100 in use", 0).start()
    real_start = ops._thread.start if ops._thread is not None else None
    assert real_start is not None

    def no_thread(self: Any) -> None:
        raise RuntimeError("can't start new thread")

    try:
        import threading

        monkeypatch.setattr(threading.Thread, "start", no_thread)
        answer = httpx.get(f"http://127.0.0.1:{ops.port}/readyz", timeout=5)
        assert answer.status_code == 503 and answer.text == "not ready: descriptors: 95 of 100 in use\n"
    finally:
        monkeypatch.undo()
        ops.stop()


# ----------------------------------------------------------------------------- the call threads
async def test_a_call_pool_that_cannot_start_a_thread_says_so_rather_than_queue_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import threading

    from runtime.worker.call_pool import CallPool

    told: list[tuple[str, BaseException]] = []
    pool = CallPool(asyncio.get_running_loop(), threads=1, on_exhausted=lambda w, e: told.append((w, e)))
    release = threading.Event()
    try:
        busy = pool.run(release.wait, 10)  # the one thread waits on its call

        def no_thread(self: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", no_thread)
        queued = pool.run(lambda: "late")
        await until(lambda: told or None, 5, "the pool to say it has no thread")
        monkeypatch.undo()
        assert told[0][0] == "starting a thread for a call" and lacking(told[0][1]) == "threads"
        assert pool.threads == 1  # the thread that failed to start is not counted as waiting for work
        release.set()
        assert await busy is True and await queued == "late"  # what queued runs once a thread is free
    finally:
        release.set()
        pool.close()


def test_a_client_that_sends_nothing_holds_the_port_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of threads the accepting thread answers each probe itself: a client that connects and
    sends nothing must not hold it (and so every later probe, and stop()) forever."""
    import socket
    import threading

    import runtime.ops.server as server_module

    ops = OpsServer(CollectorRegistry(), lambda: None, 0).start()

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    assert server_module._QuietHandler.timeout == 10.0
    try:
        monkeypatch.setattr(server_module._QuietHandler, "timeout", 0.5)  # not 10 s: a short test
        monkeypatch.setattr(threading.Thread, "start", no_thread)
        with socket.create_connection(("127.0.0.1", ops.port), timeout=5):  # sends nothing
            assert httpx.get(f"http://127.0.0.1:{ops.port}/healthz", timeout=5).status_code == 200
    finally:
        monkeypatch.undo()
        ops.stop()
