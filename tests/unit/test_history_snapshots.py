"""History snapshots of long-waiting runs (runtime/worker/snapshots.py), on the in-memory log:
a rebuild starts at the latest checkpoint and takes a waiting run from its snapshot, and ends in
the state a full read of the partition gives."""

from __future__ import annotations

import dataclasses

import pytest

from runtime.config import Settings
from runtime.log.records.events import (
    CheckpointSnapshots,
    HistorySnapshot,
    PartitionCheckpoint,
    SignalReceived,
)
from runtime.worker.rebuild import RebuiltPartition, rebuild
from runtime.worker.snapshots import records_digest, snapshot_key, vouched_key
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until
from support.rebuilds import full_read, state_of

pytestmark = pytest.mark.unit

LAG = 20  # records behind a checkpoint before a run gets a snapshot
SETTINGS = Settings(partitions=1, run_snapshot_lag=LAG)


def snapshot_app() -> App:
    app = App("snapshots")

    @app.tool("echo")
    def echo(text: str) -> str:
        return text

    @app.workflow("echo")
    async def echo_run(ctx: Context, text: str) -> str:
        result: str = await ctx.tool("echo", text=text)
        return result

    @app.workflow("two-waits")
    async def two_waits(ctx: Context, text: str) -> str:
        before: str = await ctx.tool("echo", text=text)
        first: str = await ctx.wait_signal("a")
        second: str = await ctx.wait_signal("b")
        return f"{before} {first} {second}"

    return app


def end_of_events(h: Harness) -> int:
    return h.log.watermarks(h.settings.events_topic, 0)[1]


async def traffic(h: Harness, runs: int) -> None:
    """``runs`` short runs, all ended: records after the waiting run's."""
    for run in [h.client.submit("echo", f"t{i}").run_id for i in range(runs)]:
        await h.ended(run)


def vouches(h: Harness) -> list[tuple[PartitionCheckpoint, dict[str, int]]]:
    """Every checkpoint, with the snapshots it vouches for (run -> through offset)."""
    by_covered: dict[int, dict[str, int]] = {}
    for record in h.log.read(h.settings.checkpoints_topic, 0, keep=lambda k: k == vouched_key(0)):
        vouch = h.serde.decode(record.value or b"")
        assert isinstance(vouch, CheckpointSnapshots)
        by_covered[vouch.covered_offset] = vouch.snapshot_through
    return [(c, by_covered.get(c.covered_offset, {})) for c in h.checkpoints()]


def vouching(h: Harness, run: str, past: int) -> tuple[PartitionCheckpoint, int] | None:
    """The latest checkpoint covering ``past`` that vouches for ``run``'s snapshot, and the
    snapshot's through offset, if any."""
    found = [(c, v[run]) for c, v in vouches(h) if c.covered_offset >= past and run in v]
    return found[-1] if found else None


def snapshots_of(h: Harness, run: str) -> list[HistorySnapshot | None]:
    """Every record under ``run``'s snapshot key, in order (None: a tombstone)."""
    key = snapshot_key(run)
    out: list[HistorySnapshot | None] = []
    for record in h.log.read(h.settings.checkpoints_topic, 0, keep=lambda k: k == key):
        decoded = None if record.value is None else h.serde.decode(record.value, run.encode())
        assert decoded is None or isinstance(decoded, HistorySnapshot)
        out.append(decoded)
    return out


def rebuilt_now(h: Harness) -> tuple[RebuiltPartition, RebuiltPartition]:
    """The checkpointed rebuild of partition 0 up to its end, and a full read of the same."""
    end = end_of_events(h)
    return rebuild(h.settings, h.serde, h.log, 0, end), full_read(h.settings, h.serde, h.log, 0, end)


async def waiting_run_behind_traffic(h: Harness) -> tuple[str, int]:
    """A run waiting for signal "a", then enough ended runs after it for a snapshot; the
    through offset of the snapshot a checkpoint vouches for."""
    run = h.client.submit("two-waits", "x").run_id
    await until(lambda: len(h.events(run)) >= 3, what="the waiting run's first call to complete")
    await traffic(h, 10)
    past = end_of_events(h)
    # A run is snapshotted in a round only if it appended nothing since the round before: the ten
    # runs can all end within one round (a 10 ms tick), so a round after them is waited for and
    # one more run makes the next. A generous bound: under a loaded CI machine the runs and the
    # checkpoint rounds took > 5 s.
    await until(lambda: any(c.covered_offset >= past for c in h.checkpoints()), 30, what="a checkpoint round")
    await traffic(h, 1)
    _, through = await until(lambda: vouching(h, run, past), 30, what="a checkpoint vouching for a snapshot")
    return run, through


async def test_a_rebuild_starts_at_the_checkpoint_and_takes_the_waiting_run_from_its_snapshot() -> None:
    h = Harness(snapshot_app(), settings=SETTINGS)
    h.start(checkpoint_interval_s=0)
    run, through = await waiting_run_behind_traffic(h)
    snapshot = snapshots_of(h, run)[-1]
    assert snapshot is not None and snapshot.through_offset == through
    assert [h.serde.decode(r, run.encode()) for r in snapshot.records] == h.events(run)
    assert snapshot.sha256 == records_digest(snapshot.records)
    # The last traffic run may still be active in the round that vouched; a later round lists
    # only the waiting run (on a loaded machine that round can come seconds later).
    await until(
        lambda: h.checkpoints()[-1].active_runs == {run: 1}, 30, what="a round after the traffic ended"
    )
    await h.stop()

    rebuilt, full = rebuilt_now(h)
    latest = rebuilt.checkpoint
    assert latest is not None and latest.active_runs == {run: 1}
    assert rebuilt.snapshots == {run: (snapshot.through_offset, len(snapshot.records))}
    assert rebuilt.records_read == end_of_events(h) - latest.covered_offset  # nothing before the checkpoint
    assert full.records_read == end_of_events(h)
    assert state_of(rebuilt) == state_of(full)
    # Waiting at the checkpoint with nothing after it: indexed, not replayed (runtime.worker.run_cache).
    assert list(rebuilt.waiting) == [run] and not rebuilt.active
    assert [h.serde.decode(r, run.encode()) for r in rebuilt.records[run]] == h.events(run)

    # A successor resumes the run from its snapshot; the signals complete it, each once.
    h.start("w2", checkpoint_interval_s=0)
    h.client.run(run).signal("a", "one")
    h.client.run(run).signal("b", "two")
    status = await h.ended(run)
    assert status.status == "completed" and status.result == "x one two"
    assert [e.name for e in h.events(run) if isinstance(e, SignalReceived)] == ["a", "b"]
    await h.stop_all()


def run_records_below(h: Harness, run: str, offset: int) -> list[bytes]:
    key = run.encode()
    return [
        r.value or b"" for r in h.log.read(h.settings.events_topic, 0, end=offset, keep=lambda k: k == key)
    ]


def assert_vouched_snapshots_hold_the_run_below_their_checkpoint(h: Harness, run: str) -> int:
    """Every checkpoint vouching for ``run``'s snapshot: that snapshot holds exactly the run's
    records below the checkpoint's covered offset. Returns how many checkpoints vouched."""
    by_through = {s.through_offset: s for s in snapshots_of(h, run) if s is not None}
    vouched = [(c, v[run]) for c, v in vouches(h) if run in v]
    for checkpoint, through in vouched:
        snapshot = by_through[through]
        assert snapshot.records == run_records_below(h, run, checkpoint.covered_offset)
    return len(vouched)


async def test_a_run_that_appends_after_its_snapshot_is_read_from_it_until_a_new_snapshot_replaces_it() -> (
    None
):
    h = Harness(snapshot_app(), settings=SETTINGS)
    worker = h.start(checkpoint_interval_s=0)
    run, first = await waiting_run_behind_traffic(h)
    # While the lag is out of reach, no new snapshot replaces the first one.
    writer = worker.checkpointer.snapshots
    writer.settings = SETTINGS.model_copy(update={"run_snapshot_lag": 1_000_000})
    h.client.run(run).signal("a", "one")
    await until(lambda: any(isinstance(e, SignalReceived) for e in h.events(run)), what="signal a recorded")
    signalled = end_of_events(h)
    after = await until(
        lambda: [c for c in h.checkpoints() if c.covered_offset >= signalled],
        what="a checkpoint after the signal",
    )
    latest, vouched = vouches(h)[-1]
    assert (
        latest == after[-1] and run in latest.active_runs and run not in vouched
    )  # the snapshot lacks the signal
    rebuilt, full = rebuilt_now(h)
    assert state_of(rebuilt) == state_of(full)
    assert rebuilt.snapshots[run][0] == first  # read on from the old snapshot

    # Once the lag calls for it, a new snapshot holding the signal replaces the old one.
    writer.settings = SETTINGS
    await traffic(h, 10)
    past = end_of_events(h)
    _, newest = await until(lambda: vouching(h, run, past), what="a checkpoint vouching for a newer snapshot")
    assert newest > signalled
    latest_snapshot = snapshots_of(h, run)[-1]
    assert latest_snapshot is not None
    assert [h.serde.decode(r, run.encode()) for r in latest_snapshot.records] == h.events(run)
    await h.stop()
    assert assert_vouched_snapshots_hold_the_run_below_their_checkpoint(h, run) >= 2
    rebuilt, full = rebuilt_now(h)
    assert state_of(rebuilt) == state_of(full)
    assert rebuilt.snapshots[run][0] == newest


async def test_a_snapshot_that_does_not_match_its_sha256_is_not_used() -> None:
    h = Harness(snapshot_app(), settings=SETTINGS)
    h.start(checkpoint_interval_s=0)
    run, _ = await waiting_run_behind_traffic(h)
    await h.stop()
    good = snapshots_of(h, run)[-1]
    assert good is not None
    last = good.records[-1]
    tampered = dataclasses.replace(good, records=[*good.records[:-1], last[:-1] + bytes([last[-1] ^ 0xFF])])
    h.log.append(h.settings.checkpoints_topic, 0, snapshot_key(run), h.serde.encode(tampered)).result()

    rebuilt, full = rebuilt_now(h)
    assert run not in rebuilt.snapshots  # read from its first offset instead
    assert rebuilt.records_read == end_of_events(h) - 1  # from the run's RunStarted, after the claim at 0
    assert state_of(rebuilt) == state_of(full)


async def test_the_snapshot_of_an_ended_run_is_tombstoned_after_a_checkpoint_drops_the_run() -> None:
    h = Harness(snapshot_app(), settings=SETTINGS)
    h.start(checkpoint_interval_s=0)
    run, _ = await waiting_run_behind_traffic(h)
    h.client.run(run).signal("a", "one")
    h.client.run(run).signal("b", "two")
    await h.ended(run)
    await until(lambda: snapshots_of(h, run)[-1] is None, 30, what="the snapshot's tombstone")
    await h.stop_all()
    checkpoints: list[tuple[int, PartitionCheckpoint]] = []
    tombstone = -1
    for record in h.log.read(h.settings.checkpoints_topic, 0):
        if record.key == snapshot_key(run) and record.value is None:
            tombstone = record.offset
        elif record.key == b"checkpoint/0" and record.value is not None:
            decoded = h.serde.decode(record.value)
            assert isinstance(decoded, PartitionCheckpoint)
            checkpoints.append((record.offset, decoded))
    last_listing = max(offset for offset, c in checkpoints if run in c.active_runs)
    dropping = [offset for offset, c in checkpoints if offset > last_listing]
    assert dropping and dropping[0] < tombstone  # a crash in between finds the snapshot still there
