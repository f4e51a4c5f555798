"""A cancel that reaches the workflow: raised at its current await, and what it stops.

A cancel (a client's ``cancel``, a run's deadline, a parent's cancel command) is recorded in the
run's history as ``SignalReceived(name=CANCEL_SIGNAL)`` (payload: the reason) before anything else
happens, so a replay meets it at the same point. Applying it:

1. the calls in flight at that moment (recorded, no outcome yet) are stopped: each gets a final
   ``...Failed`` record with ``error_type`` ``RunCancelledError``, written right after the cancel's
   record (the worker cancels their tasks: ``runtime.worker.cancellation``). An effect among them
   may have taken effect before it was stopped: its record says so (``in_doubt``), and
   ``agentlog status`` names it with its idempotency key. A call that was still waiting for a
   permit never started: not in doubt.
2. :class:`RunCancelledError` is raised at the workflow's current await. Code may catch it and make
   cleanup calls (``ctx.tool``/``ctx.model``: recorded and replayed like any);
3. whatever the code then does -- re-raise, return, raise something else -- the run ends as
   cancelled with the reason, after the compensations of its effects run (runtime.workflow.compensation).

A second cancel while the code cleans up stops the cleanup: the compensations run and the run ends.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime.log.records.events import (
    Event,
    ModelCallFailed,
    RunCancelled,
    RunFailed,
    RunParked,
    ToolCallFailed,
)
from runtime.workflow.intents import Intent


class RunCancelledError(BaseException):
    """Raised at the workflow's current await when its run is cancelled; ``reason`` says by what.

    A BaseException, as ``asyncio.CancelledError`` is: workflow code that guards a call with
    ``except Exception`` (a framework's agent loop does) must not swallow the cancel by accident.
    Catch it by name to clean up; the run ends as cancelled whatever the code does next."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def in_flight(commands: Mapping[int, Intent]) -> list[int]:
    """The positions of the model and tool calls recorded but without an outcome, in order."""
    return sorted(
        position
        for position, command in commands.items()
        if command.kind in ("model", "tool") and command.recorded and not command.future.done
    )


def stopped(command: Intent, reason: str, started: bool) -> ModelCallFailed | ToolCallFailed:
    """The final failure of a call the cancel stopped; ``started``: it may have begun (it was not
    waiting for a permit) -- an effect that may have begun is in doubt."""
    in_doubt = command.effect and started
    note = f"; it may have taken effect: check with its idempotency key {command.key}" if in_doubt else ""
    kind: type[ModelCallFailed] | type[ToolCallFailed] = (
        ModelCallFailed if command.kind == "model" else ToolCallFailed
    )
    return kind(
        run_id="",
        position=command.position,
        error_type=RunCancelledError.__name__,
        error=f"stopped by the run's cancel ({reason}){note}",
        attempt=command.failed_attempts + 1,
        final=True,
        in_doubt=in_doubt,
    )


def cancelled_ending(cancel: RunCancelled, ended: Event) -> Event:
    """How a cancelled run ends once its code has ended (``ended``: what that ending would have
    been): cancelled with the cancel's reason -- also when the code returned, or raised something
    else during its cleanup (named in the reason) -- unless it was parked (an operator decides)."""
    if isinstance(ended, RunParked):
        return ended
    why = cancel.reason
    if isinstance(ended, RunFailed) and ended.error_type != RunCancelledError.__name__:
        why = f"{why}; its cleanup raised {ended.error_type}: {ended.error}"
    return RunCancelled(run_id=cancel.run_id, reason=why, command_offset=cancel.command_offset)
