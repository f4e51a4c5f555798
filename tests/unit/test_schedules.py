"""Schedules as pure logic: fire times, catch-up, run ids, refusals, and the scheduler's order
(submit, then record) on the in-memory log. Kafka and real processes: tests/chaos/test_schedules_chaos.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.schedules import ScheduleError, Scheduler, Schedules, ScheduleStore, firing_run_id
from runtime.schedules.spec import Schedule, build_schedule, check_cron, parse_every
from runtime.schedules.timing import due_firings, fire_times_back, next_fire_time

pytestmark = pytest.mark.unit


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def every(seconds: int, catch_up: str = "latest", active_from: int = 0) -> Schedule:
    return build_schedule("tick", "w", "{}", every=f"{seconds}s", catch_up=catch_up, active_from=active_from)


def test_a_firing_run_id_is_the_name_and_the_fire_time_only() -> None:
    t = ms(2026, 1, 5, 9, 0, 0)
    assert firing_run_id("nightly", t) == "nightly@20260105T090000Z"
    assert firing_run_id("nightly", t + 250) == "nightly@20260105T090000.250Z"
    assert firing_run_id("nightly", t) == firing_run_id("nightly", t)
    assert firing_run_id("nightly", t) != firing_run_id("nightly", t + 2000)
    assert firing_run_id("other", t) != firing_run_id("nightly", t)


def test_interval_fire_times_are_multiples_of_it_since_the_epoch() -> None:
    s = every(2)
    now = ms(2026, 1, 1) + 7_300
    assert fire_times_back(s, now, after_ms=now - 5_000, limit=10) == [now - 1_300, now - 3_300]
    assert next_fire_time(s, now) == now + 700
    assert next_fire_time(s, now + 700) == now + 2_700  # strictly after


def test_on_time_firings_all_fire_whatever_the_catch_up() -> None:
    start = ms(2026, 1, 1)
    for policy in ("latest", "all", "none"):
        s = every(2, policy, active_from=start)
        # a scheduler that looked last 5 s ago (within the on-time window) fires each fire time since
        assert due_firings(s, start + 2_000, start + 7_000) == [start + 4_000, start + 6_000]


def test_nothing_before_active_from_and_nothing_twice() -> None:
    start = ms(2026, 1, 1) + 500
    s = every(2, active_from=start)
    assert due_firings(s, None, start + 1_000) == []  # the fire time at start - 500 predates it
    assert due_firings(s, None, start + 1_500) == [start + 1_500]
    assert due_firings(s, start + 1_500, start + 1_600) == []  # already handled


@pytest.mark.parametrize(
    ("policy", "expected_missed"),
    [("latest", 1), ("all", 6), ("none", 0)],
)
def test_catch_up_of_firings_missed_while_nothing_ran(policy: str, expected_missed: int) -> None:
    start = ms(2026, 1, 1)
    s = build_schedule("m", "w", "{}", every="1m", catch_up=policy, active_from=start)
    # Last fired at start + 1 min, nothing ran for 6 more minutes: fire times at 2..7 min are
    # due; the one at 7 min is 20 s late -- past the 15 s on-time window, so all are missed.
    now = start + 7 * 60_000 + 20_000
    due = due_firings(s, start + 60_000, now)
    assert len(due) == expected_missed
    if due:
        assert due[-1] == start + 7 * 60_000  # the most recent one is always among them
        assert due == sorted(due)


def test_catch_up_all_is_bounded() -> None:
    start = ms(2026, 1, 1)
    s = every(1, "all", active_from=start)
    due = due_firings(s, start, start + 3_600_000, max_catch_up=50)
    on_time = 15  # the last 15 s are on time and fire anyway
    assert len(due) == 50 + on_time and due[-1] == start + 3_600_000


def test_a_paused_schedule_fires_nothing() -> None:
    s = Schedule(name="p", workflow="w", input="{}", every_ms=1_000, paused=True)
    assert due_firings(s, None, ms(2026, 1, 1)) == []


def test_cron_in_a_time_zone_across_a_dst_change() -> None:
    s = build_schedule(
        "weekday", "w", "{}", cron="0 9 * * 1-5", timezone="Europe/Paris", active_from=ms(2026, 3, 26)
    )
    # Paris leaves CET (+1) for CEST (+2) on Sunday 29 March 2026: 9:00 there is 08:00Z, then 07:00Z.
    assert next_fire_time(s, ms(2026, 3, 26, 12)) == ms(2026, 3, 27, 8)
    assert next_fire_time(s, ms(2026, 3, 27, 8)) == ms(2026, 3, 30, 7)
    assert fire_times_back(s, ms(2026, 3, 30, 7), after_ms=ms(2026, 3, 26, 12), limit=5) == [
        ms(2026, 3, 30, 7),
        ms(2026, 3, 27, 8),
    ]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"cron": "61 * * * *"}, "does not parse"),
        ({"cron": "every day"}, "expected 5 fields"),
        ({"cron": "* * * * * *"}, "for seconds use --every"),
        ({"cron": "0 9 * * 1-5", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": "2 parsecs"}, "interval '2 parsecs'"),
        ({"every": "0s"}, "at least 1s"),
        ({"every": "2s", "timezone": "Europe/Paris"}, "--timezone applies to --cron only"),
        ({"cron": "@daily", "every": "2s"}, "exactly one of --cron and --every"),
        ({"every": "2s", "catch_up": "some"}, "catch-up 'some'"),
    ],
)
def test_bad_schedules_are_refused_with_the_reason(kwargs: dict[str, str], says: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        build_schedule("s", "w", "{}", active_from=0, **kwargs)  # type: ignore[arg-type]
    assert says in str(caught.value)


def test_bad_names_and_inputs_are_refused() -> None:
    with pytest.raises(ScheduleError, match="schedule name 'a b'"):
        build_schedule("a b", "w", "{}", every="2s", active_from=0)
    with pytest.raises(ScheduleError, match="--input is not JSON"):
        build_schedule("s", "w", "{nope", every="2s", active_from=0)


def test_aliases_and_units() -> None:
    assert check_cron("@daily") == "0 0 * * *"
    assert parse_every("1h30m") == 5_400_000


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000


@pytest.fixture
def store_parts() -> tuple[Settings, MemoryLog, Serde]:
    settings = Settings(partitions=1)
    return settings, MemoryLog(settings), Serde.offline(settings)


def test_schedules_are_kept_paused_resumed_and_deleted(
    store_parts: tuple[Settings, MemoryLog, Serde],
) -> None:
    settings, memory, serde = store_parts
    clock = Clock(ms(2026, 1, 1))
    schedules = Schedules(ScheduleStore(settings, memory, serde), clock)
    schedules.add("tick", "w", {"n": 1}, every="2s")
    with pytest.raises(ScheduleError, match="schedule 'tick' exists"):
        schedules.add("tick", "w", every="2s")
    # another reader of the same topic sees it, as written
    other = Schedules(ScheduleStore(settings, memory, serde), clock)
    [info] = other.list()
    assert (info.schedule.input, info.schedule.every_ms, info.next_fire_time) == (
        '{"n":1}',
        2_000,
        clock.now_ms + 2_000,
    )
    schedules.pause("tick")
    assert other.get("tick").schedule.paused and other.get("tick").next_fire_time is None
    clock.now_ms += 60_000
    schedules.resume("tick")
    assert other.get("tick").schedule.active_from == clock.now_ms  # what it missed paused never fires
    schedules.delete("tick")
    assert other.list() == []
    with pytest.raises(ScheduleError, match="no schedule named 'tick'"):
        other.pause("tick")


def test_two_schedulers_submit_the_same_run_id_for_a_fire_time(
    store_parts: tuple[Settings, MemoryLog, Serde],
) -> None:
    settings, memory, serde = store_parts
    clock = Clock(ms(2026, 1, 1) + 100)
    Schedules(ScheduleStore(settings, memory, serde), clock).add("tick", "w", every="2s")
    submitted: list[str] = []

    def submit(run_id: str, workflow: str, input_json: str) -> None:
        submitted.append(run_id)

    one = Scheduler(ScheduleStore(settings, memory, serde), submit, clock=clock)
    two = Scheduler(ScheduleStore(settings, memory, serde), submit, clock=clock)
    clock.now_ms += 2_000
    fired = one.tick() + two.tick()  # two reads what one recorded: nothing left to fire
    assert [f.run_id for f in fired] == ["tick@20260101T000002Z"] == submitted
    clock.now_ms += 4_000
    assert len(two.tick()) == 2 and one.tick() == []
    assert submitted == ["tick@20260101T000002Z", "tick@20260101T000004Z", "tick@20260101T000006Z"]


def test_a_scheduler_killed_between_submit_and_record_leaves_the_fire_time_due(
    store_parts: tuple[Settings, MemoryLog, Serde],
) -> None:
    settings, memory, serde = store_parts
    clock = Clock(ms(2026, 1, 1) + 100)
    Schedules(ScheduleStore(settings, memory, serde), clock).add("tick", "w", every="2s")
    submitted: list[str] = []

    def dies_after_submitting(run_id: str, workflow: str, input_json: str) -> None:
        submitted.append(run_id)
        raise SystemExit("killed mid-fire")

    clock.now_ms += 2_000
    with pytest.raises(SystemExit):
        Scheduler(ScheduleStore(settings, memory, serde), dies_after_submitting, clock=clock).tick()
    restarted = Scheduler(
        ScheduleStore(settings, memory, serde), lambda r, w, i: submitted.append(r), clock=clock
    )
    assert [f.run_id for f in restarted.tick()] == ["tick@20260101T000002Z"]
    # the same id twice: the worker starts it once (a repeated submission is ignored)
    assert submitted == ["tick@20260101T000002Z", "tick@20260101T000002Z"]


def test_a_scheduler_that_knows_the_app_refuses_an_unknown_workflow(
    store_parts: tuple[Settings, MemoryLog, Serde],
) -> None:
    settings, memory, serde = store_parts
    clock = Clock(ms(2026, 1, 1) + 100)
    schedules = Schedules(ScheduleStore(settings, memory, serde), clock)
    schedules.add("tick", "nope", every="2s")
    clock.now_ms += 2_000
    scheduler = Scheduler(
        ScheduleStore(settings, memory, serde),
        lambda *_: pytest.fail("submitted"),
        workflows={"w"},
        clock=clock,
    )
    [firing] = scheduler.tick()
    assert firing.refused == "unknown workflow 'nope' (registered: w)"
    info = schedules.get("tick")
    assert info.last_refused == firing.refused and info.last_run_id is None
