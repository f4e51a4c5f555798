"""The statuses of a run, and which events set them: the one definition every layer uses.

The client's ``status``, the run machine, the replayer and the analytics ``runs`` view all speak
this vocabulary. The view is released SQL, written out in a migration (analytics/migrations/), and
tests/unit/test_status.py checks that it agrees with :data:`STATUS_BY_EVENT`: a change here needs
a new migration. Keys are record type names (``Record.type``, the Avro record name, the ``type``
column of the analytics store), so this module needs nothing but strings.

A run is ``running`` from its ``RunStarted`` until an event of :data:`ENDING_EVENTS`. A parked
run ends too: no worker drives it again (an operator's ``agentlog reset`` starts a *new* run from
its history). ``unknown`` is a run id with no status event (not submitted, or not yet started).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, get_args

RunState = Literal[
    "running",
    "completed",
    "failed",
    "cancelled",
    "parked",
    "rejected",
    "continued_as_new",
    "unknown",
]

RUN_STATES: Final[tuple[RunState, ...]] = get_args(RunState)

# Event type name -> the status the run has from that event on (the last such event wins).
STATUS_BY_EVENT: Final[Mapping[str, RunState]] = MappingProxyType(
    {
        "RunStarted": "running",
        "RunCompleted": "completed",
        "RunFailed": "failed",
        "RunCancelled": "cancelled",
        "RunParked": "parked",
        "RunRejected": "rejected",
        "RunContinuedAsNew": "continued_as_new",
    }
)

# The statuses after which a run takes no further step; its event log is complete.
ENDED: Final[frozenset[RunState]] = frozenset(
    ("completed", "failed", "cancelled", "parked", "rejected", "continued_as_new")
)

# The event types that end a run, in the order of STATUS_BY_EVENT.
ENDING_EVENTS: Final[tuple[str, ...]] = tuple(
    name for name, state in STATUS_BY_EVENT.items() if state in ENDED
)


def status_after(event_type: str, current: RunState) -> RunState:
    """The run's status once an event of ``event_type`` is applied to a run in ``current``."""
    return STATUS_BY_EVENT.get(event_type, current)


def has_ended(state: str) -> bool:
    """Whether a run in ``state`` takes no further step."""
    return state in ENDED


# The result a fork records for an effecting tool call it did not make (forks run effects dry):
# the worker writes it, the audit diff tells "skipped by the fork" from "taken".
SKIPPED_IN_FORK = {"skipped": "fork"}
