"""One step of a workflow coroutine, and what its ending means as a record.

The run machine resumes the coroutine whenever what it awaits is done. A step either stops at the
next durable await (a ``ctx`` future) or ends the workflow; each way a workflow can end has its
one terminal record: a value (``RunCompleted``, or ``RunFailed`` if it is not JSON),
``ctx.continue_as_new`` (``RunContinuedAsNew``), a re-decided plan out of bounds or a lack of the
worker's (``RunParked``: an operator decides), any other exception (``RunFailed`` with its error),
and an await of something that is not durable (``RunFailed``: it could not be replayed).
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from runtime.errors import DecisionOutOfBounds, RunCannotGoOn
from runtime.log.records.events import Event, RunCompleted, RunContinuedAsNew, RunFailed, RunParked
from runtime.workflow.cancellation import RunCancelledError
from runtime.workflow.canonical import canonical_json
from runtime.workflow.compensation import Unwound
from runtime.workflow.context import ContinueAsNew
from runtime.workflow.futures import DurableFuture, GatherFuture


@dataclass(frozen=True)
class Ended:
    """The workflow ended: ``record`` says how; ``value`` is its result if it completed."""

    record: Event
    value: Any = None
    raised: bool = False  # the workflow raised: its compensations, if any, run before the run fails


def step(
    coro: Coroutine[Any, Any, Any], run_id: str, seq: int, throw: BaseException | None = None
) -> DurableFuture | GatherFuture | Ended:
    """Resume ``coro`` once: the future it awaits next, or how it ended (``seq``: the run's last
    seq, which names a continued run). ``throw``: raised at its await instead (a cancel)."""
    try:
        yielded = coro.send(None) if throw is None else coro.throw(throw)
    except StopIteration as stop:
        return _completed(run_id, stop.value)
    except ContinueAsNew as again:
        return Ended(
            RunContinuedAsNew(
                run_id=run_id, new_run_id=f"{run_id}.{seq + 1}", input=canonical_json(again.input)
            )
        )
    except DecisionOutOfBounds as error:  # not a failure: an operator decides
        return Ended(RunParked(run_id=run_id, reason=str(error), position=error.position))
    except RunCannotGoOn as error:  # the worker's lack, not the run's failure: an operator decides
        return Ended(RunParked(run_id=run_id, reason=str(error)))
    except Unwound as unwound:  # the compensations ran: the run ends as it was going to
        return Ended(unwound.event)
    except RunCancelledError as error:  # the run's cancel, not caught: the machine ends it cancelled
        return Ended(RunFailed(run_id=run_id, error_type=type(error).__name__, error=str(error)), raised=True)
    except Exception as error:  # the workflow raised: the run fails with its error
        failed = RunFailed(run_id=run_id, error_type=type(error).__name__, error=str(error))
        return Ended(failed, raised=True)
    if isinstance(yielded, (DurableFuture, GatherFuture)):
        return yielded
    coro.close()
    return Ended(
        RunFailed(
            run_id=run_id,
            error_type="NonDurableAwait",
            error=f"workflow awaited {yielded!r}; await only ctx.model/tool/sleep/wait_signal/gather",
        )
    )


def _completed(run_id: str, value: Any) -> Ended:
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as error:
        return Ended(RunFailed(run_id=run_id, error_type="ResultNotJSON", error=str(error)))
    return Ended(RunCompleted(run_id=run_id, result=text), value)
