"""One vocabulary of run statuses: the runtime's mapping, the client's RunStatus and the store's view."""

from __future__ import annotations

import json
import re
from typing import get_args

import pytest

from analytics import migrations
from runtime.log.records.events import (
    EVENT_TYPES,
    TERMINAL_TYPES,
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    PromptDrifted,
    Redecided,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunRejected,
    RunStarted,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.log.records.status import ENDED, ENDING_EVENTS, RUN_STATES, STATUS_BY_EVENT, RunState, has_ended
from runtime.run_status import (
    ForkOrigin,
    InDoubtCall,
    LoggedEvent,
    PromptDrift,
    Redecision,
    ResetOrigin,
    RetryWait,
    RunStatus,
    summarize,
)
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine

pytestmark = pytest.mark.unit

_RUN_EVENTS = {cls.__name__ for cls in EVENT_TYPES if cls.__name__.startswith("Run")}


def test_every_run_lifecycle_event_sets_a_status_of_the_vocabulary() -> None:
    assert set(STATUS_BY_EVENT) == _RUN_EVENTS
    assert set(STATUS_BY_EVENT.values()) <= set(RUN_STATES)
    assert set(RUN_STATES) == set(STATUS_BY_EVENT.values()) | {"unknown"}
    assert get_args(RunState) == RUN_STATES


def test_the_statuses_that_end_a_run_and_the_events_that_set_them_agree() -> None:
    assert set(RUN_STATES) - {"running", "unknown"} == ENDED
    assert {cls.__name__ for cls in TERMINAL_TYPES} == set(ENDING_EVENTS)
    assert all(has_ended(STATUS_BY_EVENT[name]) for name in ENDING_EVENTS)
    assert not has_ended("running") and not has_ended("unknown")
    assert STATUS_BY_EVENT["RunContinuedAsNew"] == "continued_as_new"  # ctx.continue_as_new's word


def _status_arms(sql: str) -> dict[str, str]:
    case = sql[sql.index("multiIf(") : sql.index(" AS status")]
    return dict(re.findall(r"last_status_event = '(\w+)', '(\w+)'", case))


def test_the_store_speaks_the_runtime_vocabulary() -> None:
    """The latest released runs view and runtime.log.records.status agree. The view's text is
    released SQL: if this fails because the vocabulary changed, the view's new text is a new
    migration (tests/unit/test_migrations_released.py refuses an edit of a released one)."""
    latest = next(m for m in reversed(migrations.MIGRATIONS_LIST) if "VIEW agentlog.runs" in m.statements[0])
    (runs_view,) = [s for s in latest.statements if "VIEW agentlog.runs" in s]
    assert _status_arms(runs_view) == dict(STATUS_BY_EVENT)
    assert "'unknown') AS status" in runs_view
    ended = re.search(r"maxOrNullIf\(occurred_at, type IN \(([^)]*)\)\) AS ended_at", runs_view)
    assert ended is not None and set(re.findall(r"'(\w+)'", ended.group(1))) == set(ENDING_EVENTS)


def _logged(*events: Event) -> list[LoggedEvent]:
    return [LoggedEvent(offset, 10, event) for offset, event in enumerate(events)]


def test_summarize_uses_the_vocabulary_for_every_ending_event() -> None:
    started = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0)
    ending: list[Event] = [
        RunCompleted(run_id="r", result="1"),
        RunFailed(run_id="r", error_type="E", error="boom"),
        RunCancelled(run_id="r", reason="asked", command_offset=1),
        RunParked(run_id="r", reason="stuck"),
        RunRejected(run_id="r", reason="bad input", command_offset=1),
        RunContinuedAsNew(run_id="r", new_run_id="r2", input="{}"),
    ]
    assert {type(e) for e in ending} == set(TERMINAL_TYPES)
    for event in ending:
        status = summarize("r", _logged(started, event))
        assert status.status == STATUS_BY_EVENT[event.type] and has_ended(status.status)
        assert status.result is not None or status.reason
    assert summarize("r", []).status == "unknown"
    assert summarize("r", _logged(started)).status == "running"


def test_run_status_as_dict_keeps_the_status_json_keys() -> None:
    logged = _logged(
        RunStarted(
            run_id="r", workflow="w", input="{}", command_offset=0, parent_run_id="p", reset_position=3
        ),
        ModelCallScheduled(run_id="r", position=1, model="planner", args_hash="h"),
        ModelCallCompleted(run_id="r", position=1, result="{}", in_doubt=True),
        ToolCallScheduled(
            run_id="r", position=2, tool="refund", args="{}", args_hash="h", idempotency_key="k"
        ),
        ToolCallCompleted(run_id="r", position=2, result="{}", in_doubt=True),
        Redecided(run_id="r", position=3, original="1", check="{}", replacement="2", reason="why"),
        RunParked(run_id="r", reason="stuck", position=3),
    )
    status = summarize("r", logged)
    assert status == RunStatus(
        run_id="r",
        workflow="w",
        status="parked",
        events=7,
        bytes=70,
        in_doubt=(InDoubtCall("model", 1, None, "planner"), InDoubtCall("tool", 2, "k", "refund")),
        redecided=(Redecision(position=3, original=1, replacement=2, check={}, reason="why"),),
        reset_from=ResetOrigin("p", 3),
        reason="stuck",
    )
    assert json.loads(status.to_json()) == {
        "run_id": "r",
        "workflow": "w",
        "status": "parked",
        "events": 7,
        "bytes": 70,
        "in_doubt": [
            {"kind": "model", "position": 1, "idempotency_key": None, "name": "planner"},
            {"kind": "tool", "position": 2, "idempotency_key": "k", "name": "refund"},
        ],
        "redecided": [{"position": 3, "original": 1, "replacement": 2, "check": {}, "reason": "why"}],
        "reset_from": {"run_id": "p", "position": 3},
        "result": None,
        "reason": "stuck",
        "drift": [],
        "continued_as": None,
        "continued_from": None,
        "forked_from": None,
        "compensations": [],
        "budget": None,
        "waiting_for": [],
        "retrying": [],
        "heartbeats": [],
        "parent_run_id": None,
        "children": [],
        "forged": [],
    }


def test_a_call_waiting_out_a_rate_limit_shows_when_it_retries() -> None:
    started = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0)
    scheduled = ModelCallScheduled(run_id="r", position=1, model="planner", args_hash="h")
    at = 1_792_654_080_000  # 2026-10-22 07:28:00 UTC
    limited = ModelCallFailed(
        run_id="r",
        position=1,
        error_type="ModelRateLimited",
        error="429 (asks to wait 30 s)",
        attempt=1,
        final=False,
        retry_at=at,
    )
    (wait,) = summarize("r", _logged(started, scheduled, limited)).retrying
    assert wait == RetryWait("model", 1, "planner", at, 1, "429 (asks to wait 30 s)")
    assert (
        wait.describe(at - 25_000)
        == "model 'planner' rate limited, retrying at 2026-10-22 07:28:00 UTC (in 25 s)"
    )
    assert wait.describe(at + 5_000).endswith("(in 0 s)")
    assert summarize("r", _logged(started, scheduled, limited)).as_dict()["retrying"] == [
        {
            "kind": "model",
            "position": 1,
            "name": "planner",
            "retry_at": at,
            "attempt": 1,
            "error": "429 (asks to wait 30 s)",
        }
    ]
    # the next outcome ends the wait; a failure by backoff (no retry_at) is no rate limit's wait
    done = ModelCallCompleted(run_id="r", position=1, result="{}", attempt=2)
    assert summarize("r", _logged(started, scheduled, limited, done)).retrying == ()
    backoff = ModelCallFailed(run_id="r", position=1, error_type="E", error="e", attempt=2, final=False)
    assert summarize("r", _logged(started, scheduled, limited, backoff)).retrying == ()


def test_a_fork_shows_its_origin_position_and_overrides() -> None:
    started = RunStarted(
        run_id="f",
        workflow="w",
        input="{}",
        command_offset=0,
        parent_run_id="p",
        reset_position=2,
        fork_overrides='{"model":"gpt-new","prompt_version":"v2"}',
    )
    status = summarize("f", _logged(started))
    assert status.forked_from == ForkOrigin("p", 2, {"model": "gpt-new", "prompt_version": "v2"})
    assert status.as_dict()["forked_from"] == {
        "run_id": "p",
        "position": 2,
        "overrides": {"model": "gpt-new", "prompt_version": "v2"},
    }
    assert status.forked_from.describe() == "from p at position 2, model=gpt-new prompt_version=v2"
    plain = RunStarted(
        run_id="f", workflow="w", input="{}", command_offset=0, parent_run_id="p", reset_position=2
    )
    assert summarize("f", _logged(plain)).forked_from is None, "a reset is not a fork"


def test_the_machine_reports_the_vocabulary() -> None:
    app = App("t")

    @app.workflow("done")
    async def done(ctx: Context, value: int) -> int:
        return value

    started = RunStarted(run_id="r", workflow="done", input="1", command_offset=0)
    machine = RunMachine(app, started, Stamp(lambda: 0, "test", 0))
    machine.begin()
    assert machine.status == "completed" and machine.status in RUN_STATES
    machine.park("operator")  # a run that ended is not parked again
    assert machine.status == "completed"


def test_the_audit_refuses_a_status_outside_the_vocabulary() -> None:
    from analytics import audit

    with pytest.raises(audit.AuditError, match="continued_as_new"):
        audit.runs(None, status="continued")  # type: ignore[arg-type]  # refused before any query


def test_status_lists_prompt_drift() -> None:
    events = (
        RunStarted(run_id="r", workflow="w", input="{}", command_offset=0),
        PromptDrifted(
            run_id="r",
            position=1,
            model="drafter",
            recorded_prompt_version="v1",
            issued_prompt_version="v2",
            recorded_args_hash="a",
            issued_args_hash="b",
        ),
    )
    status = summarize("r", tuple(LoggedEvent(offset, 10, event) for offset, event in enumerate(events)))
    assert status.drift == (PromptDrift(1, "drafter", "v1", "v2"),)
    assert status.drift[0].describe() == "position 1 decided under prompt v1; code now issues v2"
    assert status.as_dict()["drift"] == [
        {"position": 1, "model": "drafter", "recorded_prompt_version": "v1", "issued_prompt_version": "v2"}
    ]
