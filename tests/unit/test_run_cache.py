"""The run cache (runtime.worker.run_cache): which runs leave memory, and how they come back.

A worker keeps at most ``run_cache_size`` runs in memory; the least recently active runs that wait
only on signals or timers are evicted, and anything that reaches one -- a signal, a cancel, its
timer -- wakes it by replaying its records first. A takeover indexes the runs a checkpoint lists as
waiting without replaying them."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import pytest
from pydantic import SecretStr

from runtime.config import Settings
from runtime.log.port.protocol import Delivery
from runtime.worker import run_cache
from runtime.worker.admission import commit_point
from runtime.worker.held_commands import CommandWindow
from runtime.worker.partition import OwnedPartition
from runtime.worker.rebuild import checkpoint_key, latest_checkpoint, rebuild
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def cache_app(effects: list[str], gate: asyncio.Event) -> App:
    app = App("run-cache")

    @app.tool("note")
    def note(n: int) -> int:
        return n

    @app.tool("slow")
    async def slow(n: int) -> int:
        await gate.wait()
        return n

    @app.tool("apply", effect=True, key_args=("n",))
    def apply(n: int, approval: str, *, idempotency_key: str) -> str:
        effects.append(f"{n} {approval}")
        return f"applied {n}"

    @app.workflow("approval")
    async def approval(ctx: Context, n: int) -> Any:
        await ctx.tool("note", n=n)
        answer = await ctx.wait_signal("go")
        return await ctx.tool("apply", n=n, approval=str(answer))

    @app.workflow("twice")
    async def twice(ctx: Context, n: int) -> Any:
        await ctx.tool("note", n=n)
        first = await ctx.wait_signal("a")
        second = await ctx.wait_signal("b")
        return await ctx.tool("apply", n=n, approval=f"{first} {second}")

    @app.tool("report")
    def report(n: int) -> str:
        return f"report {n} " + "x" * 500

    @app.workflow("reported")
    async def reported(ctx: Context, n: int) -> Any:
        text = await ctx.tool("report", n=n)
        answer = await ctx.wait_signal("go")
        return await ctx.tool("apply", n=n, approval=f"{answer} {len(text)} {text[:8]}")

    @app.workflow("busy")
    async def busy(ctx: Context, n: int) -> Any:
        return await ctx.tool("slow", n=n)

    async def sleep_then_apply(ctx: Context, n: int, seconds: float) -> Any:
        await ctx.tool("note", n=n)
        await ctx.sleep(seconds)
        return await ctx.tool("apply", n=n, approval="slept")

    @app.workflow("sleeper")
    async def sleeper(ctx: Context, n: int) -> Any:
        return await sleep_then_apply(ctx, n, 0.3)

    # For a test that must stop its worker while the timer is still armed, on a loaded machine too.
    @app.workflow("long_sleeper")
    async def long_sleeper(ctx: Context, n: int) -> Any:
        return await sleep_then_apply(ctx, n, 3.0)

    @app.workflow("timeout")
    async def timeout(ctx: Context, n: int) -> Any:
        try:
            answer = str(await ctx.wait_signal("go", timeout=0.3))
        except TimeoutError:
            answer = "timed out"
        return await ctx.tool("apply", n=n, approval=answer)

    return app


def settings(size: int) -> Settings:
    return Settings(partitions=1, run_cache_size=size)


async def waiting(h: Harness, workflow: str, n: int) -> str:
    """Submit a run and wait until it waits (its first tool completed)."""
    run = h.client.submit(workflow, n).run_id
    await until(lambda: "ToolCallCompleted" in h.types(run), what=f"run {n} to wait")
    return run


def owned_of(h: Harness) -> OwnedPartition:
    return h.running["w1"][0].owned[0]


async def test_the_least_recently_active_waiting_runs_are_evicted_and_a_signal_wakes_one() -> None:
    effects: list[str] = []
    h = Harness(cache_app(effects, asyncio.Event()), settings=settings(2))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    a, b, c, d = [await waiting(h, "approval", n) for n in range(4)]
    owned = owned_of(h)
    # The two least recently active left memory; what the worker keeps of them is their records.
    assert set(owned.runs) == {c, d} and set(owned.evicted) == {a, b}
    assert owned.evicted[a].workflow == "approval" and owned.evicted[a].timers == ()
    assert [h.serde.decode(r, a.encode()) for r in owned.records[a]] == h.events(a)
    assert worker.executor.metrics.run_evictions == 2

    h.client.run(b).signal("go", "yes")
    assert (await h.ended(b)).status == "completed"
    assert worker.executor.metrics.run_wakes == 1
    # b came back (and ended): c, the least recently active waiting run, made room for it.
    assert set(owned.evicted) == {a, c} and set(owned.runs) == {d}
    for run in (a, c, d):
        h.client.run(run).signal("go", "yes")
    for run in (a, c, d):
        assert (await h.ended(run)).status == "completed"
    assert sorted(effects) == [f"{n} yes" for n in range(4)]  # each effect once
    assert not owned.runs and not owned.evicted
    types = h.types(b)
    assert types.count("RunStarted") == 1 and types.count("SignalReceived") == 1
    await h.stop()


async def test_runs_evicted_or_ended_are_counted_for_the_garbage_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cycles a run leaves when it leaves memory are collected by the watch (runtime.worker.garbage)."""
    let_go: list[int] = []

    class Counting:
        def let_go(self, runs: int = 1) -> None:
            let_go.append(runs)

    monkeypatch.setattr(run_cache, "GarbageWatch", Counting)
    h = Harness(cache_app([], asyncio.Event()), settings=settings(2))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    runs = [await waiting(h, "approval", n) for n in range(4)]
    assert sum(let_go) == 2  # two evicted
    for run in runs:
        h.client.run(run).signal("go", "yes")
    for run in runs:
        assert (await h.ended(run)).status == "completed"
    # the wakes made room by evicting others; four ended
    assert worker.executor.metrics.run_evictions > 2
    assert sum(let_go) == worker.executor.metrics.run_evictions + 4
    await h.stop()


async def test_a_run_with_a_call_in_flight_is_never_evicted() -> None:
    gate = asyncio.Event()
    h = Harness(cache_app([], gate), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    busy = h.client.submit("busy", 7).run_id
    await until(lambda: "ToolCallScheduled" in h.types(busy), what="the slow call to start")
    idle = h.client.submit("approval", 1).run_id
    owned = owned_of(h)
    # The cache is full of a busy run: the next submission is held (admission control), and the
    # run whose call is in flight is never evicted for it.
    await until(lambda: owned.admission.queue, what="the submission held")
    assert busy in owned.runs and not owned.evicted and h.types(idle) == []
    gate.set()
    assert (await h.ended(busy)).status == "completed"
    h.client.run(idle).signal("go", "ok")
    assert (await h.ended(idle)).status == "completed"
    await h.stop()


async def test_an_evicted_runs_timer_fires_and_wakes_it_once() -> None:
    effects: list[str] = []
    h = Harness(cache_app(effects, asyncio.Event()), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    sleeper = await waiting(h, "sleeper", 1)
    timed_out = h.client.submit("timeout", 2).run_id
    await until(lambda: "TimerScheduled" in h.types(timed_out), what="the signal wait with a timeout")
    other = await waiting(h, "approval", 3)
    owned = owned_of(h)
    assert sleeper in owned.evicted and owned.evicted[sleeper].timers  # its timer, kept by position
    assert (await h.ended(sleeper, timeout=5)).status == "completed"
    assert (await h.ended(timed_out, timeout=5)).status == "completed"
    assert sorted(effects) == ["1 slept", "2 timed out"]
    for run in (sleeper, timed_out):
        assert h.types(run).count("TimerFired") == 1
    assert worker.executor.metrics.run_wakes >= 2
    assert not owned.timers  # fired ones disarmed; none armed twice
    h.client.run(other).signal("go", "ok")
    assert (await h.ended(other)).status == "completed"
    await h.stop()


async def test_a_cancel_reaches_an_evicted_run() -> None:
    h = Harness(cache_app([], asyncio.Event()), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    first = await waiting(h, "approval", 1)
    await waiting(h, "approval", 2)
    assert first in owned_of(h).evicted
    h.client.run(first).cancel("no longer wanted")
    assert (await h.ended(first)).status == "cancelled"
    await h.stop()


async def test_a_run_whose_wake_raises_is_parked_with_why_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    effects: list[str] = []
    h = Harness(cache_app(effects, asyncio.Event()), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    broken = await waiting(h, "approval", 1)
    fine = await waiting(h, "approval", 2)
    assert broken in owned_of(h).evicted

    real_new_run = run_cache.new_run

    def new_run(app: App, started: Any, *args: Any, **kwargs: Any) -> Any:
        run = real_new_run(app, started, *args, **kwargs)
        if started.run_id == broken:

            def activate(activation: Any) -> Any:
                raise RuntimeError("replay blew up")

            run.activate = activate
        return run

    monkeypatch.setattr(run_cache, "new_run", new_run)
    h.client.run(broken).signal("go", "now")
    parked = await h.ended(broken)
    assert parked.status == "parked"
    assert "waking it raised RuntimeError: replay blew up" in str(h.events(broken)[-1].reason)
    assert broken not in owned_of(h).runs and broken not in owned_of(h).evicted
    h.client.run(fine).signal("go", "now")
    assert (await h.ended(fine)).status == "completed"  # the partition goes on
    assert effects == ["2 now"]
    await h.stop()


@pytest.mark.parametrize("chain_key", ["", "workers-only"], ids=["unchained", "chained"])
async def test_a_takeover_indexes_the_runs_a_checkpoint_lists_as_waiting_without_replaying_them(
    chain_key: str,
) -> None:
    effects: list[str] = []
    h = Harness(
        cache_app(effects, asyncio.Event()),
        settings=Settings(partitions=1, run_cache_size=2, chain_key=SecretStr(chain_key)),
    )
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    runs = [await waiting(h, "approval", n) for n in range(5)]
    sleeper = await waiting(h, "long_sleeper", 9)
    listed = await until(
        lambda: (c := h.checkpoints()) and set(c[-1].waiting_runs) == {*runs, sleeper} and c[-1],
        what="a checkpoint listing every waiting run",
    )
    assert listed.waiting_runs[runs[0]] == len(h.events(runs[0]))
    assert [k.rpartition("@")[0] for k in listed.waiting_timers] == [sleeper]
    await h.stop()

    end = h.log.watermarks(h.settings.events_topic, 0)[1]
    rebuilt = rebuild(h.settings, h.serde, h.log, 0, end)
    assert set(rebuilt.waiting) == {*runs, sleeper} and not rebuilt.active and not rebuilt.unloadable
    # With a chain key the records were still checked link by link, and the chain goes on from them.
    assert set(rebuilt.chain_tips) == (set() if not chain_key else {*runs, sleeper})
    assert rebuilt.records_decoded == 0  # nothing after the checkpoint, and the waiting runs unread
    assert [h.serde.decode(r, runs[0].encode()) for r in rebuilt.records[runs[0]]] == h.events(runs[0])

    second = h.start("w2")
    await until(lambda: second.owned, what="the successor to own the partition")
    owned = second.owned[0]
    assert set(owned.evicted) == {*runs, sleeper} and not owned.runs
    assert (await h.ended(sleeper, timeout=10)).status == "completed"  # its timer, armed from the index
    for run in runs:
        h.client.run(run).signal("go", "later")
    for run in runs:
        assert (await h.ended(run)).status == "completed"
    assert sorted(effects) == [*(f"{n} later" for n in range(5)), "9 slept"]
    assert second.executor.metrics.run_wakes == 6
    await h.stop("w2")


async def test_a_listed_waiting_run_with_records_after_the_checkpoint_or_another_count_is_replayed() -> None:
    effects: list[str] = []
    h = Harness(cache_app(effects, asyncio.Event()), settings=settings(10))
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    moved, still = [await waiting(h, "twice", n) for n in range(2)]
    listed = await until(
        lambda: (c := h.checkpoints()) and set(c[-1].waiting_runs) == {moved, still} and c[-1],
        what="a checkpoint listing both runs as waiting",
    )
    await h.stop()
    # A successor that writes no checkpoint: ``moved`` gets its first signal after the listing.
    second = h.start("w2")
    await until(lambda: second.owned, what="the successor to own the partition")
    h.client.run(moved).signal("a", "one")
    await until(lambda: "SignalReceived" in h.types(moved), what="the first signal recorded")
    await h.stop("w2")
    assert h.checkpoints()[-1] == listed

    end = h.log.watermarks(h.settings.events_topic, 0)[1]
    rebuilt = rebuild(h.settings, h.serde, h.log, 0, end)
    assert list(rebuilt.active) == [moved] and list(rebuilt.waiting) == [still]
    assert rebuilt.active[moved] == h.events(moved)  # its records before the checkpoint decoded too

    # A listing whose record count differs (as a fenced zombie record in the run's range would
    # make it) is not trusted: the run is decoded and replayed.
    miscounted = dataclasses.replace(
        listed, covered_offset=end, waiting_runs={moved: listed.waiting_runs[moved], still: 99}
    )
    h.log.append(h.settings.checkpoints_topic, 0, checkpoint_key(0), h.serde.encode(miscounted)).result(
        timeout=5
    )
    rebuilt = rebuild(h.settings, h.serde, h.log, 0, end)
    assert sorted(rebuilt.active) == sorted([moved, still]) and not rebuilt.waiting
    assert rebuilt.active[still] == h.events(still)

    third = h.start("w3")
    await until(lambda: third.owned, what="the third worker to own the partition")
    h.client.run(moved).signal("b", "two")
    h.client.run(still).signal("a", "x")
    h.client.run(still).signal("b", "y")
    assert (await h.ended(moved)).result == "applied 0"
    assert (await h.ended(still)).result == "applied 1"
    assert sorted(effects) == ["0 one two", "1 x y"]
    await h.stop("w3")


async def test_a_wake_reads_back_a_result_stored_out_of_line() -> None:
    effects: list[str] = []
    h = Harness(
        cache_app(effects, asyncio.Event()),
        settings=Settings(partitions=1, run_cache_size=1, payload_inline_limit=100),
    )
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    first = await waiting(h, "reported", 1)
    await waiting(h, "approval", 2)
    assert first in owned_of(h).evicted
    completed = next(e for e in h.events(first) if e.type == "ToolCallCompleted")
    assert getattr(completed, "result_offset", None) is not None  # the 500-byte result is out of line
    h.client.run(first).signal("go", "ok")
    assert (await h.ended(first)).status == "completed"
    assert effects == ["1 ok 509 report 1"]  # the workflow was handed the stored result on its wake
    await h.stop()


async def test_a_takeover_leaves_the_snapshots_of_listed_waiting_runs_undecoded() -> None:
    """A waiting run's HistorySnapshot is checked against its digest and kept as bytes, not decoded:
    a takeover's cost does not grow with the snapshots of runs that only wait."""
    effects: list[str] = []
    h = Harness(cache_app(effects, asyncio.Event()), settings=Settings(partitions=1, run_snapshot_lag=1))
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    runs = [await waiting(h, "approval", n) for n in range(3)]
    last = await waiting(h, "approval", 3)  # puts records behind the first three: snapshots due
    everyone = {*runs, last}
    for n in range(10, 13):  # traffic: checkpoints that find the waiting runs unchanged take snapshots
        assert (await h.ended(h.client.submit("timeout", n).run_id)).status == "completed"
    await until(
        lambda: set(latest_checkpoint(h.settings, h.serde, h.log, 0).snapshots) >= set(runs),
        what="a snapshot of the first three waiting runs",
    )
    await until(  # a checkpoint after the snapshots: the runs are read from them, not from their starts
        lambda: (c := h.checkpoints()) and set(c[-1].waiting_runs) == everyone and len(h.checkpoints()) > 2,
        what="a checkpoint after the snapshots",
    )
    await h.stop()

    decoded: list[tuple[bytes | None, str]] = []  # (key, type) of each record a rebuild decodes
    serde = h.serde
    counting = dataclasses.replace(serde) if dataclasses.is_dataclass(serde) else copy.copy(serde)

    def decode(value: bytes, key: bytes | None = None) -> Any:
        record = serde.decode(value, key)
        decoded.append((key, record.type))
        return record

    counting.decode = decode  # type: ignore[method-assign]  # counts what a rebuild decodes
    end = h.log.watermarks(h.settings.events_topic, 0)[1]
    rebuilt = rebuild(h.settings, counting, h.log, 0, end)
    assert set(rebuilt.waiting) == everyone and not rebuilt.active
    assert set(rebuilt.snapshots) >= set(runs)  # read from their snapshots ...
    of_runs = [kind for key, kind in decoded if key is not None and key.decode() in runs]
    assert of_runs == ["HistorySnapshot"] * len(runs)  # ... read, and their records left undecoded

    second = h.start("w2")
    await until(lambda: second.owned, what="the successor to own the partition")
    for run in everyone:
        h.client.run(run).signal("go", "later")
    for run in everyone:
        assert (await h.ended(run)).status == "completed"  # woken from the snapshot's records
    assert sorted(effects) == sorted(
        [*(f"{n} later" for n in range(4)), *["10 timed out", "11 timed out", "12 timed out"]]
    )
    await h.stop("w2")


# ------------------------------------------------------------------ admission control
# At most run_cache_size busy runs: further submissions and wakes of evicted runs are held, in
# their partition's order, and admitted as busy runs end or begin waiting (runtime.worker.admission).


def started_order(h: Harness, runs: list[str]) -> list[str]:
    """``runs`` in the order of their RunStarted records in the events topic."""
    offsets = {}
    for run in runs:
        logged = next(e for e in h.client.run(run).events() if e.event.type == "RunStarted")
        offsets[run] = logged.offset
    return sorted(runs, key=offsets.__getitem__)


def command_offset(h: Harness, run: str, type_: str) -> int:
    event = next(e for e in h.events(run) if e.type == type_)
    offset = getattr(event, "command_offset", None)
    assert isinstance(offset, int)
    return offset


async def test_submissions_past_the_busy_bound_are_held_and_admitted_in_their_order() -> None:
    gate = asyncio.Event()
    h = Harness(cache_app([], gate), settings=settings(2))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    runs = [h.client.submit("busy", n).run_id for n in range(6)]
    owned = owned_of(h)
    await until(lambda: len(owned.admission.queue) == 4, what="four submissions held")
    # Two busy runs in memory, the other four not started: no RunStarted, held in offset order.
    assert set(owned.runs) == set(runs[:2]) and worker.executor.runs.busy() == 2
    assert worker.admission.held() == 4
    assert [d.key for d in owned.admission.queue] == [r.encode() for r in runs[2:]]
    assert all(h.types(r) == [] for r in runs[2:])
    gate.set()
    for run in runs:
        assert (await h.ended(run)).status == "completed"
    assert started_order(h, runs) == runs
    assert worker.executor.metrics.run_cache_peak == 2  # never more in memory than the bound
    assert not owned.admission.queue and not owned.admission.runs and worker.admission.held() == 0
    await h.stop()


async def test_run_cache_busy_max_bounds_the_busy_runs_apart_from_the_cache_size() -> None:
    with pytest.raises(ValueError, match="run_cache_busy_max"):
        Settings(partitions=1, run_cache_busy_max=0)
    gate = asyncio.Event()
    h = Harness(cache_app([], gate), settings=Settings(partitions=1, run_cache_size=10, run_cache_busy_max=3))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    runs = [h.client.submit("busy", n).run_id for n in range(5)]
    owned = owned_of(h)
    await until(lambda: len(owned.admission.queue) == 2, what="two submissions held")
    assert set(owned.runs) == set(runs[:3])
    gate.set()
    for run in runs:
        assert (await h.ended(run)).status == "completed"
    await h.stop()


async def test_a_cancel_and_a_signal_to_a_run_in_memory_are_not_starved_behind_held_submissions() -> None:
    gate = asyncio.Event()
    effects: list[str] = []
    h = Harness(cache_app(effects, gate), settings=settings(1))
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    evicted = await waiting(h, "approval", 1)
    busy = h.client.submit("busy", 2).run_id
    await until(lambda: "ToolCallScheduled" in h.types(busy), what="the busy run's call to start")
    owned = owned_of(h)
    assert evicted in owned.evicted and busy in owned.runs  # the cache is full of one busy run
    held = h.client.submit("approval", 3).run_id
    woken = await waiting_held(h, owned, 1)
    assert woken == held
    # Behind the held submission: a cancel of the evicted run and a signal to the busy one.
    h.client.run(evicted).cancel("not needed")
    h.client.run(busy).signal("note", "hi")
    assert (await h.ended(evicted)).status == "cancelled"
    await until(lambda: "SignalReceived" in h.types(busy), what="the signal to the busy run")
    assert h.types(held) == [] and len(owned.admission.queue) == 1  # still held meanwhile
    # The checkpoint commits no offset past the held submission, and lists those handled past it.
    held_at = owned.admission.queue[0].offset
    handled = {command_offset(h, evicted, "RunCancelled"), command_offset(h, busy, "SignalReceived")}
    checkpoint = await until(
        lambda: (c := h.checkpoints()) and handled <= set(c[-1].commands_handled) and c[-1],
        what="a checkpoint listing the commands handled past the held one",
    )
    assert checkpoint.commands_offset == held_at
    assert all(offset > held_at for offset in checkpoint.commands_handled)
    gate.set()
    assert (await h.ended(busy)).status == "completed"
    await until(lambda: "ToolCallCompleted" in h.types(held), what="the held run admitted, to its wait")
    h.client.run(held).signal("go", "yes")
    assert (await h.ended(held)).status == "completed"
    assert effects == ["3 yes"]
    last = await until(
        lambda: (c := h.checkpoints()) and c[-1].commands_offset > max(handled) and c[-1],
        what="a checkpoint past every command",
    )
    assert last.commands_handled == []
    await h.stop()


async def waiting_held(h: Harness, owned: OwnedPartition, count: int) -> str:
    await until(lambda: len(owned.admission.queue) == count, what=f"{count} command(s) held")
    key = owned.admission.queue[-1].key
    assert key is not None
    return key.decode()


async def test_a_signal_waits_behind_its_runs_held_command() -> None:
    gate = asyncio.Event()
    effects: list[str] = []
    h = Harness(cache_app(effects, gate), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    first = await waiting(h, "twice", 1)
    busy = h.client.submit("busy", 2).run_id
    await until(lambda: "ToolCallScheduled" in h.types(busy), what="the busy run's call to start")
    owned = owned_of(h)
    assert first in owned.evicted
    h.client.run(first).signal("a", "one")  # a wake: held
    await waiting_held(h, owned, 1)
    # Its run woken meanwhile (a cancel would; here: by hand, as a timer would), the second signal
    # still goes behind the first: a run's commands keep their order.
    worker.executor.runs.run(owned, first)
    assert first in owned.runs
    h.client.run(first).signal("b", "two")
    await waiting_held(h, owned, 2)
    gate.set()
    assert (await h.ended(first)).status == "completed"
    assert effects == ["1 one two"]
    await h.stop()


async def test_a_crash_neither_skips_nor_repeats_a_held_command() -> None:
    gate = asyncio.Event()
    effects: list[str] = []
    h = Harness(cache_app(effects, gate), settings=settings(1))
    worker = h.start(checkpoint_interval_s=0)
    await until(lambda: worker.owned, what="the worker to own the partition")
    evicted = await waiting(h, "approval", 1)
    busy = h.client.submit("busy", 2).run_id
    await until(lambda: "ToolCallScheduled" in h.types(busy), what="the busy run's call to start")
    owned = owned_of(h)
    held = h.client.submit("approval", 3).run_id
    await waiting_held(h, owned, 1)
    h.client.run(evicted).cancel("not needed")  # handled past the held submission
    assert (await h.ended(evicted)).status == "cancelled"
    h.client.run("never-submitted").signal("go", "x")  # ignored past it: no record
    h.client.run(busy).signal("note", "once")  # to a run in memory, active at the crash
    await until(lambda: "SignalReceived" in h.types(busy), what="the signal to the busy run")
    cancelled_at = command_offset(h, evicted, "RunCancelled")
    await until(
        lambda: (c := h.checkpoints()) and cancelled_at in c[-1].commands_handled,
        what="a checkpoint listing the cancel",
    )
    h.client.run(held).signal("go", "after the crash")  # behind its held submission
    await waiting_held(h, owned, 2)
    last_command = owned.next_command
    await h.stop()  # the held submission and its signal were never handled

    second = h.start("w2")  # the busy run still busy: the signal to it would apply again
    await until(
        lambda: second.owned and second.owned[0].next_command >= last_command,
        what="the successor to read every command again",
    )
    gate.set()
    assert (await h.ended(held, timeout=5)).status == "completed"
    assert (await h.ended(busy, timeout=5)).status == "completed"
    assert effects == ["3 after the crash"]
    assert h.types(held).count("RunStarted") == 1 and h.types(held).count("SignalReceived") == 1
    assert h.types(evicted).count("RunCancelled") == 1  # the cancel skipped, not applied again
    assert h.types(busy).count("SignalReceived") == 1  # nor the signal
    assert not second.owned[0].admission.queue
    await h.stop("w2")


async def test_a_timer_due_for_an_evicted_run_waits_for_room_and_fires_once() -> None:
    gate = asyncio.Event()
    effects: list[str] = []
    h = Harness(cache_app(effects, gate), settings=settings(1))
    worker = h.start()
    await until(lambda: worker.owned, what="the worker to own the partition")
    sleeper = await waiting(h, "sleeper", 1)
    busy = h.client.submit("busy", 2).run_id
    await until(lambda: "ToolCallScheduled" in h.types(busy), what="the busy run's call to start")
    owned = owned_of(h)
    assert sleeper in owned.evicted
    # Its timer falls due (0.3 s) while the cache is full of the busy run: held, not fired.
    await until(lambda: worker.admission.held() == 1, what="the sleeper's timer held")
    assert "TimerFired" not in h.types(sleeper) and sleeper in owned.evicted
    gate.set()
    assert (await h.ended(sleeper)).status == "completed"
    assert h.types(sleeper).count("TimerFired") == 1 and effects == ["1 slept"]
    await h.stop()


def test_a_window_skips_what_was_handled_and_ignores_again_a_signal_older_than_its_run() -> None:
    window = CommandWindow.of(10, 20, {9, 12, 15, 25}, {"late": 15, "early": 11})
    assert window is not None
    assert window.handled == {12, 15}  # below the commit point or past the window: not its business
    assert window.skips(12) and not window.skips(13) and not window.skips(25)
    # A signal at 13 found "late" not started (its submission is at 15): ignored again; one at 16
    # came after it. A run started before the window is not in it.
    assert window.started_after("late", 13) and not window.started_after("late", 16)
    assert not window.started_after("early", 13) and not window.started_after("old", 13)
    assert CommandWindow.of(20, 20, {}, {}) is None


def test_the_commit_point_is_the_first_held_command_and_handled_offsets_past_it_are_listed() -> None:
    owned = OwnedPartition(0, 1, Stamp(lambda: 0, "w1", 1), 5, set())
    assert commit_point(owned) == 5
    held = owned.admission
    held.hold(Delivery(0, 5, b"a", b""), "a")
    owned.next_command = 6
    held.note_handled(6, commit_point(owned))  # handled past the held one
    owned.next_command = 7
    assert commit_point(owned) == 5 and held.handled_above(5) == [6]
    assert held.release().offset == 5 and not held.runs
    owned.next_command = 8
    held.note_handled(7, commit_point(owned))  # nothing held before it: not listed
    assert commit_point(owned) == 8 and held.handled_above(8) == []
