"""Which recorded runs a what-if replays: ``--workflow``, ``--last``, ``--since``, ``--status`` or a list of ids.

The runs are read from the events topic itself (every partition, fenced records dropped): the log
is the truth, and a what-if must not depend on the audit store having caught up. What-if runs and
forks are never production runs: a selection never picks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import PARTITION_TYPES, Event, RunStarted
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.status import STATUS_BY_EVENT, RunState, has_ended, status_after
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde

# What a run's listing needs: the records that set its status, and the claims that fence zombies.
_READ = frozenset({*STATUS_BY_EVENT, *(t.__name__ for t in PARTITION_TYPES)})


class SelectionError(AgentlogError):
    """The runs asked for cannot be selected; the message names what was wrong."""


@dataclass(frozen=True)
class LoggedRun:
    """One run as its records in the events topic show it."""

    run_id: str
    workflow: str
    status: RunState
    started_ms: int
    whatif: str | None  # the what-if it belongs to (None: not a what-if run)
    forked: bool  # a fork or a what-if run: not production
    whatif_change: str | None = None  # a what-if run's change, as recorded (runtime.workflow.whatif_change)

    @property
    def production(self) -> bool:
        return not self.forked and self.whatif is None


@dataclass(frozen=True)
class Selection:
    """What ``agentlog whatif`` was asked to replay."""

    run_ids: tuple[str, ...] = ()
    workflow: str | None = None
    last: int | None = None
    since_ms: int | None = None
    status: str | None = "completed"

    def describe(self) -> str:
        if self.run_ids:
            return f"{len(self.run_ids)} named runs"
        parts = [f"workflow {self.workflow}" if self.workflow else "every workflow"]
        if self.status:
            parts.append(f"status {self.status}")
        if self.since_ms is not None:
            parts.append(f"since {self.since_ms} ms")
        if self.last is not None:
            parts.append(f"the last {self.last}")
        return ", ".join(parts)


def logged_runs(log: EventLog, serde: Serde, settings: Settings) -> dict[str, LoggedRun]:
    """Every run the events topic holds (run id -> what its records say), in start order."""
    runs: dict[str, LoggedRun] = {}
    for partition in range(settings.partitions):
        fence = FenceFilter()
        for record in log.read(settings.events_topic, partition):
            if record.value is None:
                continue
            try:  # the type first (a lookup by schema id): most records need no decoding here
                if serde.record_name(record.value) not in _READ:
                    continue
                event = serde.decode(record.value, record.key)
            except DecodeError:
                continue  # a record this code cannot read: its run is left out of what is picked
            assert isinstance(event, Event)
            if not fence.admit(event, record.offset) or isinstance(event, PARTITION_TYPES):
                continue
            if isinstance(event, RunStarted):
                runs[event.run_id] = LoggedRun(
                    event.run_id,
                    event.workflow,
                    "running",
                    event.occurred_at,
                    event.whatif,
                    event.fork_overrides is not None or event.whatif is not None,
                    event.whatif_change,
                )
            elif event.run_id in runs:
                run = runs[event.run_id]
                state = status_after(event.type, run.status)
                if state != run.status:
                    runs[event.run_id] = dataclasses.replace(run, status=state)
    return dict(sorted(runs.items(), key=lambda item: (item[1].started_ms, item[0])))


def select(runs: dict[str, LoggedRun], selection: Selection) -> list[LoggedRun]:
    """The runs of ``selection``, oldest first. Raises SelectionError naming unknown ids, runs
    that have not ended (a fork needs a finished history to compare against), a workflow no
    production run used, or a selection that picks nothing."""
    if selection.run_ids:
        return _named(runs, selection.run_ids)
    production = [r for r in runs.values() if r.production]
    if selection.workflow is not None and not any(r.workflow == selection.workflow for r in production):
        used = sorted({r.workflow for r in production})
        raise SelectionError(
            f"no recorded run used workflow {selection.workflow!r} (the log holds runs of: "
            f"{', '.join(used) or 'none'})"
        )
    picked = [
        r
        for r in production
        if (selection.workflow is None or r.workflow == selection.workflow)
        and (selection.status is None or r.status == selection.status)
        and (selection.since_ms is None or r.started_ms >= selection.since_ms)
        and has_ended(r.status)
    ]
    if selection.last is not None:
        picked = picked[-selection.last :] if selection.last > 0 else []
    if not picked:
        raise SelectionError(f"no ended run matches {selection.describe()}: nothing to replay")
    return picked


def _named(runs: dict[str, LoggedRun], run_ids: Sequence[str]) -> list[LoggedRun]:
    unknown = [r for r in run_ids if r not in runs]
    if unknown:
        raise SelectionError(f"unknown run ids (not in the log): {', '.join(unknown)}")
    not_production = [r for r in run_ids if not runs[r].production]
    if not_production:
        raise SelectionError(
            f"runs that are forks or what-if runs, not recorded production runs: {', '.join(not_production)}"
        )
    running = [r for r in run_ids if not has_ended(runs[r].status)]
    if running:
        raise SelectionError(
            f"runs that have not ended (nothing to compare against yet): {', '.join(running)}"
        )
    return [runs[r] for r in dict.fromkeys(run_ids)]


def whatif_runs(runs: Iterable[LoggedRun], whatif_id: str) -> list[LoggedRun]:
    """The runs of one what-if, in start order."""
    return [r for r in runs if r.whatif == whatif_id]
