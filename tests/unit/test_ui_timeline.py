"""The UI's pure parts: a run's events as a timeline, the time axis with collapsed gaps, the SVG."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ui import svg, timeline

pytestmark = pytest.mark.unit


class Events:
    """Events shaped as ``analytics.audit.run_events`` returns them (times in ms, log order)."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.seq = 0

    def add(self, kind: str, at: int, epoch: int = 0, worker: str = "w1", **fields: Any) -> None:
        self.seq += 1
        self.out.append(
            {"seq": self.seq, "type": kind, "occurred_at": at, "epoch": epoch, "worker": worker, **fields}
        )

    def model(self, position: int, at: int, took: int = 5, **outcome: Any) -> None:
        self.add("ModelCallScheduled", at, position=position, model="planner", args_hash="h")
        self.add(
            "ModelCallCompleted",
            at + took,
            position=position,
            result='{"ok":1}',
            latency_us=took * 1000,
            **outcome,
        )

    def tool(
        self, position: int, at: int, took: int = 2, tool: str = "lookup", key: str | None = None
    ) -> None:
        self.add(
            "ToolCallScheduled",
            at,
            position=position,
            tool=tool,
            args_hash="t",
            args="{}",
            idempotency_key=key,
        )
        self.add("ToolCallCompleted", at + took, position=position, result="{}", latency_us=took * 1000)


def test_steps_are_decisions_with_the_tool_calls_that_follow() -> None:
    events = Events()
    events.add("RunStarted", 0, workflow="refund")
    events.tool(1, 1)  # before the first decision: step 0
    for step in range(1, 4):
        events.model(2 * step, 10 * step)
        events.tool(2 * step + 1, 10 * step + 6)
    line = timeline.build(events.out)
    assert line.steps == 3
    assert [(c.position, c.step) for c in line.calls] == [
        (1, 0),
        (2, 1),
        (3, 1),
        (4, 2),
        (5, 2),
        (6, 3),
        (7, 3),
    ]


def test_an_in_doubt_call_shows_its_lost_attempt_up_to_the_next_workers_claim() -> None:
    events = Events()
    events.add("RunStarted", 0, workflow="refund")
    events.add("ModelCallScheduled", 100, position=1, model="planner", args_hash="h")
    # The worker died; the next one (epoch 7, claimed at 5000 ms) re-ran the call, in doubt.
    events.add(
        "ModelCallCompleted",
        5200,
        epoch=7,
        worker="w2",
        position=1,
        result="{}",
        latency_us=50_000,
        in_doubt=True,
    )
    claims = {7: {"occurred_at": "1970-01-01T00:00:05.000Z", "worker": "w2", "offset": 7}}
    line = timeline.build(events.out, claims)
    (call,) = line.calls
    assert call.in_doubt and [c.position for c in line.in_doubt] == [1]
    lost, rerun = call.attempts
    assert (lost.outcome, lost.start_ms, lost.end_ms, lost.epoch) == ("lost", 100, 5000, 0)
    assert (rerun.outcome, rerun.start_ms, rerun.end_ms, rerun.epoch) == ("completed", 5150, 5200, 7)
    assert [(e.epoch, e.previous_epoch, e.worker, e.at_ms) for e in line.epochs] == [(7, 0, "w2", 5000)]


def test_retries_are_attempts_of_one_call() -> None:
    events = Events()
    events.add(
        "ToolCallScheduled", 0, position=1, tool="refund", args_hash="t", args="{}", idempotency_key="k"
    )
    events.add(
        "ToolCallFailed",
        10,
        position=1,
        error_type="Timeout",
        error="slow",
        attempt=1,
        final=False,
        latency_us=10_000,
    )
    events.add(
        "ToolCallFailed",
        30,
        position=1,
        error_type="Timeout",
        error="slow",
        attempt=2,
        final=False,
        latency_us=15_000,
    )
    events.add("ToolCallCompleted", 40, position=1, result="{}", attempt=3, latency_us=5_000)
    (call,) = timeline.build(events.out).calls
    assert [(a.number, a.outcome) for a in call.attempts] == [
        (1, "retrying"),
        (2, "retrying"),
        (3, "completed"),
    ]
    assert [(a.start_ms, a.end_ms) for a in call.attempts] == [(0, 10), (15, 30), (35, 40)]
    assert call.outcome == "completed" and call.fields["idempotency_key"] == "k"


def test_waits_and_flags() -> None:
    events = Events()
    events.model(1, 0)
    events.add("TimerScheduled", 10, position=2, name="sleep", fire_at=3_600_010, duration_ms=3_600_000)
    events.add("TimerFired", 3_600_020, position=2)
    events.add(
        "TimerScheduled", 3_600_030, position=3, name="approval", fire_at=9_000_000, duration_ms=5_000_000
    )
    events.add("SignalReceived", 3_700_000, name="approval", payload="{}", command_offset=1)
    events.add(
        "Redecided",
        3_700_010,
        position=4,
        original="{}",
        check="order_open",
        replacement="{}",
        reason="closed",
    )
    events.model(5, 3_700_020)
    events.add(
        "NonDeterminismDetected", 3_700_100, position=6, expected="tool x", issued="tool y", message="differs"
    )
    line = timeline.build(events.out)
    assert [(s.kind, s.name, s.start_ms, s.end_ms) for s in line.spans] == [
        ("timer", "sleep", 10, 3_600_020),
        ("signal", "approval", 3_600_030, 3_700_000),
    ]
    assert [f.kind for f in line.flags] == ["redecided", "non_determinism"]
    # The re-decision belongs to the replacement decision (the model call after the Redecided record).
    assert [f.kind for f in line.calls[1].flags] == ["redecided"]


def test_the_axis_collapses_idle_gaps_and_keeps_busy_time_linear() -> None:
    axis = svg.TimeAxis(0, 10_100, [(0, 50), (10_000, 10_100)], width=1000)
    (gap,) = axis.breaks
    assert (gap.t0, gap.t1, gap.x1 - gap.x0) == (50, 10_000, svg.GAP_PX)
    # 150 ms of busy time share the rest of the width, at one scale on both sides of the break.
    per_ms = (1000 - svg.GAP_PX) / 150
    assert axis.x(25) == pytest.approx(25 * per_ms)
    assert axis.x(10_050) - axis.x(10_000) == pytest.approx(50 * per_ms)
    assert axis.x(0) < axis.x(50) <= axis.x(5_000) <= axis.x(10_000)  # monotonic through the break


def test_short_gaps_are_not_collapsed() -> None:
    axis = svg.TimeAxis(0, 900, [(0, 10), (800, 900)], width=900)
    assert axis.breaks == [] and axis.x(450) == pytest.approx(450)


def test_the_svg_has_a_row_per_step_a_clickable_call_each_and_the_markers() -> None:
    events = Events()
    events.model(1, 0)
    events.tool(2, 6, tool="refund", key="key-1")
    events.add("ModelCallScheduled", 20, position=3, model="planner", args_hash="h")
    events.add(
        "ModelCallCompleted",
        5000,
        epoch=9,
        worker="w2",
        position=3,
        result="{}",
        latency_us=1000,
        in_doubt=True,
    )
    drawn = svg.render(timeline.build(events.out))
    assert re.findall(r'class="step-row[^"]*" data-step="(\d+)"', drawn) == ["1", "2"]
    assert re.findall(r'data-call="(\d+)" data-step', drawn) == ["1", "2", "3"]
    assert 'class="call model completed in-doubt"' in drawn and "in doubt (planner)" in drawn
    assert 'class="epoch-change" data-epoch="9"' in drawn and "worker w2" in drawn
    assert "planner \u2192 refund" in drawn  # one label per step


def test_flags_are_drawn_on_their_calls_and_a_reset_names_its_origin() -> None:
    events = Events()
    events.add("RunStarted", 0, workflow="refund", parent_run_id="original", reset_position=3)
    events.model(1, 1)
    events.add("Redecided", 10, position=2, original="{}", check="still_open", replacement="{}")
    events.model(3, 11)
    events.add("NonDeterminismDetected", 20, position=5, expected="a", issued="b", message="m")
    events.add("ToolCallScheduled", 21, position=5, tool="refund", args_hash="t", args="{}")
    line = timeline.build(events.out)
    assert (line.parent_run_id, line.reset_position) == ("original", 3)
    drawn = svg.render(line)
    assert 'class="flag-marker redecided" data-call="3"' in drawn
    assert 'class="flag-marker non_determinism" data-call="5"' in drawn
    assert 'class="call tool pending flag-non_determinism"' in drawn


@pytest.mark.parametrize(("value", "level"), [(10, "ok"), (100, "over-warn"), (600, "over-limit")])
def test_gauge_levels(value: int, level: str) -> None:
    assert f'class="gauge {level}"' in svg.gauge(value, 100, 500, "events")


def test_a_compensating_call_names_the_effect_it_undoes() -> None:
    from ui.pages import _render

    events = Events()
    events.add("RunStarted", 0, workflow="refund_saga")
    events.add(
        "ToolCallScheduled",
        1,
        position=1,
        tool="issue_refund",
        args_hash="h",
        effect=True,
        idempotency_key="k1",
    )
    events.add("ToolCallCompleted", 2, position=1, result="{}", latency_us=1000)
    events.add(
        "ToolCallScheduled",
        3,
        position=2,
        tool="reverse_refund",
        args_hash="h2",
        effect=True,
        idempotency_key="k2",
        compensates=1,
    )
    events.add("ToolCallCompleted", 4, position=2, result="{}", latency_us=1000)
    html = _render("calls.html", calls=timeline.build(events.out).calls)
    assert html.count('class="compensates"') == 1
    assert 'undoes the effect at <a href="#call-1">position 1</a>' in html


def test_a_call_that_waited_for_a_permit_says_how_long_and_for_what() -> None:
    events = Events()
    events.add("ModelCallScheduled", 0, position=17, model="planner", args_hash="h")
    events.add("PermitAwaited", 5, position=17, attempt=1, limit="openai", dimension="requests_per_minute")
    events.add(
        "PermitGranted",
        40_105,
        position=17,
        attempt=1,
        limit="openai",
        dimension="requests_per_minute",
        waited_ms=40_100,
    )
    events.add("ModelCallCompleted", 40_200, position=17, result='{"ok":1}', latency_us=90_000)
    events.add("ModelCallScheduled", 40_300, position=18, model="planner", args_hash="h")
    events.add("PermitAwaited", 40_301, position=18, limit="tenants", key="acme", dimension="concurrent")
    line = timeline.build(events.out, now_ms=52_301)
    assert [(f.position, f.detail) for f in line.flags] == [
        (17, "waited 40.1 s for openai requests/min"),
        (18, "waiting for tenants[acme] concurrent calls, 12.0 s so far"),
    ]
    assert [f.kind for f in line.calls[0].flags] == ["permit_wait"]
    assert "waited for a permit" in svg.render(line)


def test_a_run_page_names_a_child_s_parent_and_a_parent_s_children() -> None:
    parent = Events()
    parent.add("RunStarted", 0, workflow="triage")
    for position in (1, 2):
        parent.add(
            "ChildRunScheduled",
            position,
            position=position,
            child_run_id=f"p.child{position}",
            workflow="refund",
        )
    parent.add("ChildRunEnded", 5, position=1, child_run_id="p.child1", child_status="failed")
    line = timeline.build(parent.out)
    assert line.child_of is None
    assert line.children == {"p.child1": ["refund", "failed"], "p.child2": ["refund", "running"]}
    child = Events()
    child.add("RunStarted", 0, workflow="refund", child_of="p")
    assert timeline.build(child.out).child_of == "p"
