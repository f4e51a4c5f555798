"""The code each run of a worker runs with: the deployment's app, or, for a what-if of a new code
version (``agentlog whatif --app module:app``), that version -- if the worker was started with it
(``agentlog worker --whatif-app module:app``).

A what-if run names its version in its ``RunStarted`` (runtime.workflow.whatif_change), so a takeover
or a wake from the cache builds it with the same code. Only listed versions are ever imported: a
record never makes a worker import code. A what-if run is always dry (runtime.workflow.machine), so
a version's effects, even ones the deployment's code never had, are recorded and never called.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Protocol

from runtime.errors import AgentlogError
from runtime.log.records.events import RunStarted, RunSubmitted
from runtime.workflow.activation import RunInstance
from runtime.workflow.app import App
from runtime.workflow.instance import new_run
from runtime.workflow.intents import Stamp
from runtime.workflow.whatif_change import WhatifChange, WhatifChangeError


class Build(Protocol):
    def __call__(
        self, app: App, started: RunStarted, stamp: Stamp, *, history_warn_events: int
    ) -> RunInstance: ...


class CodeVersions:
    """The deployment's app and the what-if code versions a worker holds."""

    def __init__(self, app: App, versions: Mapping[str, App] | None = None) -> None:
        self.app = app
        self.versions = dict(versions or {})
        # Runs built with a version, to call their tools and models with its code (weak: a run
        # evicted or ended leaves nothing behind here).
        self._of: weakref.WeakKeyDictionary[RunInstance, App] = weakref.WeakKeyDictionary()

    def app_for(self, record: RunStarted | RunSubmitted) -> App:
        """The code a run of ``record`` runs with; AgentlogError naming the version if this worker
        does not hold it, or if the record's what-if change cannot be read."""
        if not record.whatif_change:
            return self.app
        try:
            version = WhatifChange.from_json(record.whatif_change).app
        except WhatifChangeError as error:
            raise AgentlogError(str(error)) from error
        if version is None:
            return self.app
        found = self.versions.get(version)
        if found is None:
            held = ", ".join(sorted(self.versions)) or "none"
            raise AgentlogError(
                f"what-if code version {version!r} is not held by this worker (start it with "
                f"--whatif-app {version}; it holds: {held})"
            )
        return found

    def new_run(
        self, started: RunStarted, stamp: Stamp, build: Build = new_run, *, history_warn_events: int
    ) -> RunInstance:
        """``build`` (``new_run``, as the caller's module names it: tests replace it there) with the
        run's code (AgentlogError as ``app_for`` and ``build`` raise)."""
        app = self.app_for(started)
        run = build(app, started, stamp, history_warn_events=history_warn_events)
        if app is not self.app:
            self._of[run] = app
        return run

    def of(self, run: RunInstance) -> App:
        """The code ``run``'s calls are made with."""
        # No version held (the common case, asked several times a call): no run has other code. A
        # plain dict's truth, not the weak dictionary's length (two Python-level calls).
        if not self.versions or not self._of:
            return self.app
        return self._of.get(run, self.app)
