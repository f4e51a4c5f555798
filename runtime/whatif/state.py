"""A what-if as the log holds it: its change, its plan and which of its forks exist, read back for
``--resume`` and ``--report`` (nothing of a what-if lives only in the memory of the process that
started it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.errors import AgentlogError
from runtime.whatif.change import Change
from runtime.whatif.selection import LoggedRun, whatif_runs
from runtime.workflow.whatif_change import WhatifChange


class UnknownWhatif(AgentlogError):
    """No what-if of that id is in the log, or its plan is not."""


@dataclass(frozen=True)
class WhatifState:
    """A what-if read back from its forks' ``RunStarted`` records."""

    whatif_id: str
    change: Change
    plan: tuple[str, ...]  # every selected run, in the order the what-if took them
    forks: dict[str, LoggedRun]  # fork id -> the fork, for the forks the log holds


def whatif_state(runs: Mapping[str, LoggedRun], whatif_id: str) -> WhatifState:
    """The what-if ``whatif_id`` from ``runs`` (every run of the log, runtime.whatif.selection).
    Raises UnknownWhatif if none of its forks is in the log (it never started, or started none)
    or none carries its plan."""
    forks = whatif_runs(runs.values(), whatif_id)
    if not forks:
        known = sorted({r.whatif for r in runs.values() if r.whatif is not None})
        raise UnknownWhatif(
            f"no what-if {whatif_id!r} in the log (what-ifs it holds: {', '.join(known) or 'none'})"
        )
    changes = [WhatifChange.from_json(r.whatif_change) for r in forks if r.whatif_change]
    planned = next((c for c in changes if c.plan), None)
    if planned is None:
        raise UnknownWhatif(
            f"what-if {whatif_id!r}: none of its {len(forks)} runs in the log carries its plan "
            "(its first fork did not start): start the what-if again"
        )
    return WhatifState(whatif_id, Change.of(planned), planned.plan, {r.run_id: r for r in forks})
