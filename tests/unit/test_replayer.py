"""The replayer is a public API, checked against golden histories recorded from real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runtime
import runtime.log.records.events
from runtime.errors import NonDeterminismError
from runtime.replay.replayer import Replayer, load_history
from support.agent_apps import app

pytestmark = pytest.mark.unit
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_golden_history_replays_to_the_recorded_result() -> None:
    history = load_history(GOLDEN / "short-3-steps.json")
    result = Replayer(app=app).replay(history)
    assert result.ok and result.status == "completed" and result.result == "48211"
    assert result.events_replayed == len(history) == 8


def test_deliberately_nondeterministic_history_names_position_and_both_commands() -> None:
    history = load_history(GOLDEN / "short-3-steps-nondeterministic.json")
    with pytest.raises(NonDeterminismError) as error:
        Replayer(app=app).replay(history)
    assert error.value.position == 2
    assert '"step":5' in error.value.expected and '"step":1' in error.value.issued
    quiet = Replayer(app=app, raise_on_replay_failure=False).replay(history)
    assert not quiet.ok and quiet.divergence is not None and quiet.divergence.position == 2


def test_a_history_the_code_stops_short_of_is_a_divergence() -> None:
    items = json.loads((GOLDEN / "short-3-steps.json").read_text())
    items[0]["input"] = json.dumps({"order": "48211", "steps": 2})  # the code now stops after 2 calls
    with pytest.raises(NonDeterminismError) as error:
        Replayer(app=app).replay(load_history_from(items))
    assert error.value.position == 3


def load_history_from(items: list[dict[str, object]]) -> list[runtime.log.records.events.Event]:
    from runtime.replay.replayer import history_from_json

    return history_from_json(items)


def test_public_api_is_pinned() -> None:
    assert sorted(runtime.__all__) == [
        "AgentlogError",
        "App",
        "Budget",
        "CallFailed",
        "ChildRunFailed",
        "Client",
        "ConfigError",
        "Context",
        "DeadlineError",
        "DecisionOutOfBounds",
        "HeartbeatTimeout",
        "InDoubtCall",
        "NonDeterminismError",
        "Replayer",
        "RetryLater",
        "RetryPolicy",
        "RetryableError",
        "RunAlreadyEnded",
        "RunCancelledError",
        "RunError",
        "RunHandle",
        "RunState",
        "RunStatus",
        "Settings",
        "TerminalError",
        "cancelled",
        "heartbeat",
        "last_heartbeat",
        "load_settings",
        "run_local",
    ]
