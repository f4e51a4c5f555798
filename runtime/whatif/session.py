"""A what-if from start to report: select, check, fork, compare -- or resume or report one from the log.

Every check runs before the first fork starts: an unknown run, a workflow or model the runs never
used, code that does not register what they need. What is known of a started what-if is what the
log holds (runtime.whatif.state), so ``resume`` and ``report`` work from any process, at any time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.client import Client
from runtime.client.commands import new_run_id
from runtime.log.records.events import Event
from runtime.pricing import PriceTable
from runtime.whatif.change import Change, check_app, check_change, check_models
from runtime.whatif.forks import DEFAULT_WINDOW, PlannedRun, plan, run_forks
from runtime.whatif.histories import read_histories
from runtime.whatif.report import Report, build_report, rows_for
from runtime.whatif.selection import Selection, logged_runs, select
from runtime.whatif.state import whatif_state
from runtime.workflow.app import App


@dataclass(frozen=True)
class Options:
    """How a what-if runs: forks at once, how long one may take, the prices to cost it with."""

    window: int = DEFAULT_WINDOW
    timeout: float = 300.0
    prices: PriceTable | None = None
    progress: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Prepared:
    """A what-if checked and planned, not started."""

    whatif_id: str
    change: Change
    planned: tuple[PlannedRun, ...]
    histories: dict[str, list[Event]]  # the selected runs' events, read once


def prepare(client: Client, selection: Selection, change: Change, app: App | None = None) -> Prepared:
    """Select the runs and check the change against them and against ``app`` (the ``--app`` code,
    else the code the workers run: needed for a ``--model`` change, whose NEW model it must
    register); SelectionError or ChangeError naming what is wrong, before anything is written."""
    check_models(change, app)
    selected = select(logged_runs(client.log, client.serde, client.settings), selection)
    histories = read_histories(client, [r.run_id for r in selected])
    workflows = {r.run_id: r.workflow for r in selected}
    if change.models or change.prompts:
        check_change(change, histories)
    if app is not None:
        check_app(change, app, workflows)
    origins = [r.run_id for r in selected]
    return Prepared(new_run_id()[:12], change, tuple(plan(change, origins, histories)), histories)


def start(client: Client, prepared: Prepared, options: Options) -> Report:
    """Run a prepared what-if's forks and report on them."""
    run_forks(
        client,
        prepared.whatif_id,
        prepared.change,
        prepared.planned,
        window=options.window,
        timeout=options.timeout,
        progress=options.progress,
        histories=prepared.histories,
    )
    return _report(client, prepared, prepared.histories, options.prices)


def _planned(client: Client, whatif_id: str) -> tuple[Prepared, set[str], dict[str, list[Event]]]:
    """A started what-if's plan as the log holds it, the forks it already started, and the
    histories of the runs it selected."""
    state = whatif_state(logged_runs(client.log, client.serde, client.settings), whatif_id)
    histories = read_histories(client, state.plan)
    planned = tuple(plan(state.change, state.plan, histories))
    return Prepared(whatif_id, state.change, planned, histories), set(state.forks), histories


def resume(client: Client, whatif_id: str, options: Options) -> Report:
    """Start the forks an interrupted what-if had not started, wait for all, and report. Raises
    UnknownWhatif if the log holds no run of the what-if or not its plan."""
    prepared, started, _ = _planned(client, whatif_id)
    run_forks(
        client,
        whatif_id,
        prepared.change,
        prepared.planned,
        started=started,
        window=options.window,
        timeout=options.timeout,
        progress=options.progress,
        histories=prepared.histories,
    )
    return report(client, whatif_id, options.prices)


def report(client: Client, whatif_id: str, prices: PriceTable | None = None) -> Report:
    """The what-if's report as far as it got: forks not started or not ended are "pending"."""
    prepared, _, originals = _planned(client, whatif_id)
    return _report(client, prepared, originals, prices)


def _report(
    client: Client, prepared: Prepared, originals: dict[str, list[Event]], prices: PriceTable | None
) -> Report:
    forks = [f for p in prepared.planned if (f := p.fork_of(prepared.whatif_id)) is not None]
    forked = {k: v for k, v in read_histories(client, forks).items() if v}
    rows = rows_for(prepared.planned, prepared.whatif_id, originals, forked, prices)
    return build_report(prepared.whatif_id, prepared.change.describe(), rows)
