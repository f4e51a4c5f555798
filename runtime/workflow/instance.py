"""Where a run in memory comes from: :func:`new_run` builds one for its ``RunStarted``.

What it returns is driven only through its door (runtime.workflow.activation): the first
activation is a ``Wake`` -- on the run's history after a takeover or for a reset's copy, on
nothing for a new run. Nothing outside :mod:`runtime.workflow` imports the machine itself (an
import-linter contract, ``runs-behind-one-door``).
"""

from __future__ import annotations

from runtime.log.records.events import RunStarted
from runtime.workflow.activation import RunInstance
from runtime.workflow.app import App
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import HISTORY_WARN_EVENTS, RunMachine


def new_run(
    app: App, started: RunStarted, stamp: Stamp, *, history_warn_events: int = HISTORY_WARN_EVENTS
) -> RunInstance:
    """The run ``started`` begins, in memory, not yet activated (AgentlogError if ``app`` does
    not register its workflow). ``stamp`` stamps what it records: the clock, the worker, the epoch."""
    return RunMachine(app, started, stamp, history_warn_events)
