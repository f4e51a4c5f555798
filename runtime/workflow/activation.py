"""The one door into a run: what a worker hands it (an activation) and what it hands back (a completion).

Everything outside :mod:`runtime.workflow` -- the worker, the replayer, reset and fork, a run
cache -- drives a run with one call, ``completion = run.activate(activation)`` (Temporal's
``WorkflowInstance.activate`` in spirit), and reads it only through ``completion.view`` /
``run.view``. The run machine (:class:`runtime.workflow.machine.RunMachine`) is the one
implementation of :class:`RunInstance`; :func:`runtime.workflow.instance.new_run` makes one.

In, one of:
- :class:`Wake` -- bring the run into memory from its recorded history (none for a new run),
  replay it, and go live from its end. Taking a partition over, starting a reset's copy, and
  waking a run a cache evicted are the same call: the recovery path is the only way in.
- :class:`Deliver` -- a live record for the run: a call's outcome, a signal received.
- :class:`TimerDue` -- the timer (or a signal wait's timeout) at a position is due.
- :class:`Cancel` -- an operator's cancel (the run unwinds its compensations first, if any).
- :class:`Park` -- stop the run without failing it (the worker's history limit, a budget).
- :class:`Fail` -- fail the run from outside its code (a budget it would exceed).

Out, a :class:`Completion`: the stamped records to append, in order; the messages to store out
of line before those records (they point at them); the intents (calls, timers, signal waits) to
carry out once their records are durable; and the run's :class:`RunView`.

An activation and its completion are made on every step of every run, so they are named tuples
(immutable, and cheaper to build than a frozen dataclass); the view, rebuilt a few times in
a run, is a frozen dataclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from runtime.errors import NonDeterminismError
from runtime.log.records.events import Event
from runtime.log.records.status import RunState
from runtime.workflow.budget import Spend
from runtime.workflow.exposed import Exposed
from runtime.workflow.intents import Drift, InDoubt, Intent

# A completion without out-of-line messages (nearly all of them) shares this one, read-only.
NO_BLOBS: Mapping[str, bytes] = MappingProxyType({})


class Wake(NamedTuple):
    """Replay ``history`` (the run's records, RunStarted first; empty for a run just started) and,
    ``go_live``, carry on live from its end: commands history never saw get their records, and a
    call recorded as scheduled with no outcome (in flight at a crash) is run again, in doubt.
    Without ``go_live`` (the offline replayer) nothing is issued: the first recorded command the
    code did not reach is reported as the divergence."""

    history: Sequence[Event] = ()
    go_live: bool = True


class Deliver(NamedTuple):
    """A live record for the run (a call's ``...Completed`` or ``...Failed``, a ``SignalReceived``):
    stamped, applied and returned to append. ``result_text``: the result of a ``...Completed`` whose
    record points at it stored out of line -- the log gets the pointer, the workflow the value."""

    event: Event
    result_text: str | None = None


class TimerDue(NamedTuple):
    """The timer, or signal wait's timeout, at ``position`` is due: a ``TimerFired`` if the run
    still waits for it, else nothing."""

    position: int


class Cancel(NamedTuple):
    """Cancel the run now, or -- effects to compensate -- record the request and unwind first."""

    reason: str
    command_offset: int


class Park(NamedTuple):
    """Stop the run without failing it (an operator decides what happens next); nothing if it ended."""

    reason: str


class Fail(NamedTuple):
    """Fail the run now, from outside its code (a budget it would exceed: runtime.worker.budgets):
    a ``RunFailed`` with ``error_type`` and ``error``; nothing if it ended. Its compensations are
    not run (as for a park): the record is the decision, and replay serves it as recorded."""

    error_type: str
    error: str


Activation = Wake | Deliver | TimerDue | Cancel | Park | Fail


@dataclass(frozen=True, slots=True)
class RunView:
    """What the worker and the replayer read of a run; a new one only when one of its fields changes."""

    run_id: str
    workflow: str
    dry_run: bool  # a fork: effecting tools are recorded as skipped, never called
    status: RunState
    result: Any = None  # the workflow's value, once it completed
    in_doubt: tuple[InDoubt, ...] = ()  # calls run again after a crash (or served as such in replay)
    drift: tuple[Drift, ...] = ()  # model calls served from history under a changed prompt
    divergence: NonDeterminismError | None = None
    old_patches: tuple[str, ...] = ()  # patch ids whose old branch the run keeps
    # What a run with a budget has spent, as its record holds it (runtime.workflow.budget): grown in
    # place by the machine, so a step makes no new view; None for a run without a budget.
    spend: Spend | None = None
    # (limit name, key) of each limit keyed by a field of the run's input (app.limit(per=...)).
    limit_keys: tuple[tuple[str, str], ...] = ()
    parent_run_id: str | None = None  # a child run's parent (runtime.workflow.children)
    # What the run exposes to queries (ctx.expose; runtime.workflow.exposed): grown in place by the
    # machine, like spend; None for a run made without one.
    exposed: Exposed | None = None
    # status == "running", kept as a field: it is read several times on every call's path, and a
    # view is made only a few times in a run.
    active: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", self.status == "running")


class Completion(NamedTuple):
    """What one activation produced, to be carried out in this order: ``blobs`` stored, ``records``
    appended, ``intents`` started once the records before them are durable."""

    records: list[Event]
    intents: list[Intent]
    blobs: Mapping[str, bytes]
    view: RunView
    # (position, name) of each signal wait without a timeout the code began live in this activation
    # (never in a replay): no record stands for one, so the worker tells watchers of it from here.
    signal_waits: tuple[tuple[int, str], ...] = ()


class RunInstance(Protocol):
    """A run in memory, driven only through :meth:`activate`."""

    @property
    def view(self) -> RunView: ...

    def activate(self, activation: Activation) -> Completion: ...

    def waiting(self) -> bool:
        """True if all the run waits for is timers or signals (a metrics scrape asks; not kept per
        step, which would cost every step)."""
        ...

    def timers(self) -> tuple[tuple[int, int], ...]:
        """(position, fire_at ms) of each recorded timer or signal timeout the run still waits for:
        what a run cache keeps of a run it evicts, to fire them without the run in memory."""
        ...

    def open_children(self) -> tuple[tuple[str, str], ...]:
        """(child run id, parent_close policy) of each child the run started that has not ended:
        what the worker cancels (policy "cancel") once the run's ending is durable."""
        ...

    def close(self) -> None:
        """Let the run go from memory: its workflow coroutine is closed (GeneratorExit), and the run
        is not activated again; a wake is a new run from its history."""
        ...
