"""Replaying a recorded history against the current workflow code, offline (a public API).

Use it before deploying a change: replay the histories of in-flight (or golden) runs and
see whether the new code still issues the same commands. Nothing is called and nothing is
written: results come from the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import AgentlogError, NonDeterminismError
from runtime.log.records.events import RECORD_TYPES, Event, RunStarted
from runtime.log.records.status import RunState
from runtime.workflow.activation import Wake
from runtime.workflow.app import App
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Drift, Stamp


@dataclass(frozen=True)
class ReplayResult:
    """What replaying one history found."""

    run_id: str
    workflow: str
    status: RunState
    events_replayed: int
    divergence: NonDeterminismError | None
    result: Any
    # Model calls served from history under a changed prompt (not a failure: seed 003).
    drift: tuple[Drift, ...] = ()
    # Patch ids whose old branch this history keeps (``ctx.patched`` returned False): while such
    # a run is in flight, the marker and its old branch must stay in the code.
    old_patches: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.divergence is None


class Replayer:
    """Replays histories with the workflows of ``app``; mirrors the worker's construction."""

    def __init__(self, *, app: App, raise_on_replay_failure: bool = True) -> None:
        self.app = app
        self.raise_on_replay_failure = raise_on_replay_failure

    def replay(self, history: Sequence[Event]) -> ReplayResult:
        if not history or not isinstance(history[0], RunStarted):
            raise AgentlogError("a history starts with RunStarted")
        started = history[0]
        run = new_run(self.app, started, Stamp(lambda: started.occurred_at, "replayer", -1))
        # Offline: report what the code did with the history, never go live.
        view = run.activate(Wake(history, go_live=False)).view
        if view.divergence is not None and self.raise_on_replay_failure:
            raise view.divergence
        return ReplayResult(
            started.run_id,
            started.workflow,
            view.status,
            len(history),
            view.divergence,
            view.result,
            view.drift,
            tuple(dict.fromkeys(view.old_patches)),
        )

    def replay_all(self, histories: Iterable[Sequence[Event]]) -> list[ReplayResult]:
        return [self.replay(history) for history in histories]


def history_from_json(items: Sequence[dict[str, Any]]) -> list[Event]:
    """Events from the output of ``agentlog history --json`` (extra keys such as offset are ignored)."""
    events: list[Event] = []
    for item in items:
        if not isinstance(item, dict) or "type" not in item:
            raise AgentlogError(f"not an event (no type): {str(item)[:200]}")
        cls = RECORD_TYPES.get(item["type"])
        if cls is None:
            raise AgentlogError(f"unknown event type {item['type']!r} at seq {item.get('seq')}")
        fields = {k: v for k, v in item.items() if k in cls.__dataclass_fields__}
        try:
            event = cls(**fields)
        except TypeError as exc:  # a required field missing
            raise AgentlogError(f"{item['type']} at seq {item.get('seq')}: {exc}") from exc
        assert isinstance(event, Event)
        events.append(event)
    return events


def load_history(path: Path) -> list[Event]:
    """A history saved with ``agentlog history --json``; AgentlogError if the file is not one."""
    try:
        items = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AgentlogError(f"{path}: cannot read a saved history: {exc}") from exc
    if not isinstance(items, list):
        raise AgentlogError(f"{path}: a saved history is a JSON array of events")
    return history_from_json(items)
