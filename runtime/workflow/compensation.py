"""Compensations (a saga): undoing a run's effects, semantically, when the run cannot finish.

Seed 000: "a compensating action ... undoes its partner from a semantic point of view" -- a refund
is undone by reversing it, not by erasing the record that it happened. Workflow code registers
the compensation with the effect::

    refund = await ctx.tool("issue_refund", order=o, amount=a,
                            compensate_with=("reverse_refund", {"order": o}))

When a later step fails (the workflow raises) or the run is cancelled, the machine stops driving
the workflow's coroutine and drives ``unwind`` instead: it waits for the registered effects still
in flight to settle, then calls the compensation of each effect that completed, newest first, and
ends the run as it would have ended (``RunFailed`` with the workflow's error, ``RunCancelled``
with the cancel's reason). A compensation whose tool fails after its retries parks the run
(``RunParked``): what is left to undo needs an operator, and the reason names it.

Each compensation is an ordinary effecting tool call: recorded (``ToolCallScheduled`` with
``compensates`` = the position of the effect it undoes), replayed, retried by its policy. Its
idempotency key is derived from the key of the effect it undoes (itself derived from the run):
``uuid5(NAMESPACE, "<effect key>/compensate/<tool>")``. A worker killed in the middle of the
unwind is rebuilt like any run: the recorded compensations are served from history, the one in
flight is executed again with its recorded key (in doubt), and nothing completed runs twice.

A cancellation is recorded in the run's log as ``SignalReceived(name=CANCEL_SIGNAL)`` (payload:
the reason); it is raised at the workflow's await, which may clean up first
(runtime.workflow.cancellation), and the unwind starts when the workflow's code has ended, so a
replay switches to it at the same point. An effect the cancel stopped mid-flight failed, yet may
have taken effect: it is undone like one that completed (``Saga.in_doubt``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.errors import AgentlogError, CallFailed
from runtime.log.records.events import Event, RunCancelled, RunFailed, RunParked
from runtime.workflow.app import App
from runtime.workflow.canonical import NAMESPACE
from runtime.workflow.futures import DurableFuture

# Signal names agentlog keeps for itself: a client refuses to send them, a worker ignores them.
RESERVED_SIGNAL_PREFIX = "agentlog:"
# The name of the signal that records a cancellation whose run has compensations to run.
CANCEL_SIGNAL = f"{RESERVED_SIGNAL_PREFIX}cancel"


class Compensator(Protocol):
    """What the unwind needs of the run it undoes: its id, the key each effect was recorded with,
    and a way to issue a compensating tool call. The run machine provides it; this module never
    imports the machine."""

    run_id: str

    def effect_key(self, position: int) -> str:
        """The idempotency key recorded with the effect issued at ``position``."""
        ...

    def issue_tool(
        self, name: str, args: dict[str, Any], *, key: str | None = None, compensates: int | None = None
    ) -> DurableFuture: ...


class Unwound(BaseException):
    """Raised by ``unwind`` at its end: the run ends with ``event``. A BaseException, so workflow
    code's ``except Exception`` never swallows it (the unwind coroutine holds no user code anyway)."""

    def __init__(self, event: Event) -> None:
        super().__init__(event.type)
        self.event = event


@dataclass
class Registered:
    """An effect with its compensation, registered when the effect was issued."""

    position: int  # the effect's
    tool: str  # the effect's
    future: DurableFuture  # the effect's outcome
    compensation: str  # the compensating tool
    args: dict[str, Any]


@dataclass
class Saga:
    """A run's registered compensations, in issue order."""

    registered: list[Registered] = field(default_factory=list)
    unwinding: bool = False
    # Effects a cancel stopped mid-flight (runtime.workflow.cancellation): failed, yet they may have
    # taken effect, so they are undone too (the compensation's key derives from theirs).
    in_doubt: set[int] = field(default_factory=set)

    def checked(self, app: App, tool: str, compensate_with: Any) -> tuple[str, dict[str, Any]]:
        """``compensate_with`` as (compensating tool, arguments), checked before the effect is issued."""
        name, args = _parse(compensate_with, tool)
        spec = app.tools.get(tool)
        if spec is None or not spec.effect:
            raise AgentlogError(f"compensate_with is for effecting tools; {tool!r} is not one (effect=True)")
        compensating = app.tools.get(name)
        if compensating is None or not compensating.effect:
            known = sorted(n for n, t in app.tools.items() if t.effect)
            raise AgentlogError(
                f"compensation {name!r} of {tool!r} must be a registered effecting tool (known: {known})"
            )
        return name, args

    def add(self, effect: DurableFuture, tool: str, compensation: tuple[str, dict[str, Any]]) -> None:
        self.registered.append(Registered(effect.position, tool, effect, *compensation))

    def pending(self) -> bool:
        """Something may need undoing: an effect with a compensation that did not fail."""
        return any(not r.future.failed or r.position in self.in_doubt for r in self.registered)

    def unwind(self, run: Compensator, ending: Event) -> Coroutine[Any, Any, None]:
        """The coroutine the machine drives in place of the workflow's (see the module docstring)."""
        self.unwinding = True
        return _unwind(run, list(self.registered), ending, frozenset(self.in_doubt))


def compensation_key(effect_key: str, tool: str) -> str:
    """The idempotency key of ``tool`` undoing the effect whose key is ``effect_key``."""
    return str(uuid.uuid5(NAMESPACE, f"{effect_key}/compensate/{tool}"))


def cancelled_by(payload: str, command_offset: int, run_id: str) -> RunCancelled:
    return RunCancelled(run_id=run_id, reason=json.loads(payload), command_offset=command_offset)


async def _unwind(
    run: Compensator, registered: list[Registered], ending: Event, in_doubt: frozenset[int]
) -> None:
    # Effects still in flight settle first: one that completes is undone like the others.
    for entry in registered:
        if not entry.future.done:
            with contextlib.suppress(CallFailed):  # it did not take effect: nothing to undo
                await entry.future
    for entry in reversed(registered):
        if entry.future.failed and entry.position not in in_doubt:
            continue
        try:
            await run.issue_tool(
                entry.compensation,
                entry.args,
                key=compensation_key(run.effect_key(entry.position), entry.compensation),
                compensates=entry.position,
            )
        except CallFailed as failed:
            left = [
                f"{r.compensation} of {r.tool} at position {r.position}"
                for r in registered
                if r.position < entry.position and (not r.future.failed or r.position in in_doubt)
            ]
            raise Unwound(
                RunParked(
                    run_id=run.run_id,
                    reason=f"compensation {entry.compensation} of {entry.tool} at position {entry.position} "
                    f"failed ({failed}); not compensated yet: {left or 'nothing'}; the run ended as: "
                    f"{_describe(ending)}",
                    position=failed.position,
                )
            ) from failed
    raise Unwound(ending)


def _describe(event: Event) -> str:
    if isinstance(event, RunFailed):
        return f"failed, {event.error_type}: {event.error}"
    if isinstance(event, RunCancelled):
        return f"cancelled, {event.reason}"
    return event.type


def _parse(compensate_with: Any, tool: str) -> tuple[str, dict[str, Any]]:
    if (
        isinstance(compensate_with, tuple)
        and len(compensate_with) == 2
        and isinstance(compensate_with[0], str)
        and isinstance(compensate_with[1], dict)
    ):
        return compensate_with[0], dict(compensate_with[1])
    raise AgentlogError(
        f"compensate_with of {tool!r} must be a (tool name, {{arguments}}) pair, got {compensate_with!r}"
    )
