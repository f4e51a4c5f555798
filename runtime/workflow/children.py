"""Child runs: what ``ctx.child`` / ``ctx.start_child`` issue, and a child's ending as the parent sees it.

A child is a run of its own (its own history, in the partition of its own id), started by a
parent. Its id derives from the parent's run id and the position of the call that started it
(:func:`child_run_id`), never from the clock: a replayed or recovered parent issues the same id,
and the child's partition ignores a submission of an id it knows, so a child starts once.

The parent records ``ChildRunScheduled`` (matched on replay like any call: kind, workflow, hash of
the canonical input and policy); once it is durable the worker submits the child. The child's
ending comes back to the parent's partition as a ``ChildEnded`` command, recorded in the parent's
history as ``ChildRunEnded``, which resolves the handle. A handle's ``signal`` / ``cancel`` is a
command of its own (``ChildRunSignalled``), sent once its record is durable.

Pure functions and the handle; the run machine keeps positions and history, the worker sends.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel

from runtime.errors import ChildRunFailed, TerminalError
from runtime.log.records.events import ChildRunEnded, ChildRunScheduled, ChildRunSignalled
from runtime.workflow.app import App
from runtime.workflow.budget import Spend, spend_from_json
from runtime.workflow.canonical import args_hash, canonical_json
from runtime.workflow.futures import DurableFuture
from runtime.workflow.input_shape import shape_error
from runtime.workflow.intents import Intent

ParentClose = Literal["cancel", "run_on"]
PARENT_CLOSE: tuple[str, ...] = ("cancel", "run_on")
CHILD = "child"  # Intent.kind of a child's start
CHILD_SIGNAL = "child_signal"  # Intent.kind of a handle's signal or cancel
ENDED_STATUSES = ("completed", "failed", "cancelled", "rejected")


def child_run_id(parent_run_id: str, position: int) -> str:
    """The id of the child a run starts at ``position``: the same on every replay of the parent."""
    return f"{parent_run_id}.child{position}"


class ChildSender(Protocol):
    def issue_child_signal(
        self, handle: ChildHandle, name: str, payload: Any, cancel: bool
    ) -> DurableFuture: ...


class ChildHandle(DurableFuture):
    """A child run started by ``ctx.start_child``: await it for its result (a failed, cancelled or
    rejected child raises :class:`~runtime.errors.ChildRunFailed`), ``signal`` it, or ``cancel`` it."""

    __slots__ = ("_host", "run_id", "workflow")

    def __init__(self, position: int, run_id: str, workflow: str, host: ChildSender) -> None:
        super().__init__(position)
        self.run_id = run_id
        self.workflow = workflow
        # Weak: a run's futures must not keep its machine alive once a cache drops it.
        self._host: Callable[[], ChildSender | None] = weakref.ref(host)

    def signal(self, name: str, payload: Any = None) -> DurableFuture:
        """Send the signal ``name`` to the child (recorded in the parent's history, sent once it is
        durable). The returned future is done at once: awaiting it is optional."""
        return self._send(name, payload, cancel=False)

    def cancel(self, reason: str = "") -> DurableFuture:
        """Cancel the child (recorded, then sent); its ending reaches this handle as a failure."""
        return self._send(reason or "cancelled by its parent", None, cancel=True)

    def _send(self, name: str, payload: Any, cancel: bool) -> DurableFuture:
        host = self._host()
        if host is None:
            raise TerminalError(f"child run {self.run_id}: its parent is no longer in memory")
        return host.issue_child_signal(self, name, payload, cancel)


def child_intent(
    app: App,
    next_position: Callable[[], int],
    parent_run_id: str,
    workflow: str,
    input: Any,
    parent_close: str,
    host: ChildSender,
) -> Intent:
    """The command starting a child; a TerminalError (no position taken) if the workflow is not
    registered, the input does not fit it or is not JSON, or the policy is not one of PARENT_CLOSE."""
    spec = app.workflows.get(workflow)
    if spec is None:
        raise TerminalError(
            f"child workflow {workflow!r} is not registered (known: {', '.join(sorted(app.workflows))})"
        )
    if parent_close not in PARENT_CLOSE:
        raise TerminalError(f"parent_close must be one of {PARENT_CLOSE}, got {parent_close!r}")
    value = input.model_dump(mode="json") if isinstance(input, BaseModel) else input
    try:
        text = canonical_json(value)
    except TypeError as error:
        raise TerminalError(f"child workflow {workflow!r}: its input is not JSON: {error}") from error
    problem = shape_error(spec.input_type, orjson.loads(text))
    if problem is not None:
        raise TerminalError(f"child workflow {workflow!r}: wrong input shape: {problem}")
    position = next_position()
    args = {"input": text, "parent_close": parent_close}
    run_id = child_run_id(parent_run_id, position)
    command = Intent(
        position,
        CHILD,
        workflow,
        args,
        args_hash(CHILD, workflow, args),
        ChildHandle(position, run_id, workflow, host),
    )
    command.key = run_id  # the child's derived id plays the part an effect's key plays
    return command


def signal_intent(position: int, handle: ChildHandle, name: str, payload: Any, cancel: bool) -> Intent:
    args = {"child": handle.run_id, "name": name, "payload": canonical_json(payload), "cancel": cancel}
    command = Intent(
        position, CHILD_SIGNAL, name, args, args_hash(CHILD_SIGNAL, name, args), DurableFuture(position)
    )
    command.key = handle.run_id
    command.future.set_result(None)  # sent once recorded: nothing comes back to wait for
    return command


def scheduled_child(command: Intent, run_id: str) -> ChildRunScheduled | ChildRunSignalled:
    """The record a child command writes before the worker sends anything."""
    assert command.key is not None
    if command.kind == CHILD:
        return ChildRunScheduled(
            run_id=run_id,
            position=command.position,
            child_run_id=command.key,
            workflow=command.name,
            args_hash=command.hash,
            input=command.args["input"],
            parent_close=command.args["parent_close"],
        )
    return ChildRunSignalled(
        run_id=run_id,
        position=command.position,
        child_run_id=command.key,
        name=command.name,
        payload=command.args["payload"],
        cancel=command.args["cancel"],
    )


def child_command(children: Mapping[str, Intent], run_id: str) -> Intent | None:
    """The command that started the child ``run_id`` names: the child itself, or a run its chain
    continued as (``<child id>.<seq>``, ctx.continue_as_new), whose ending ends the child's."""
    command = children.get(run_id)
    while command is None and "." in run_id:
        run_id = run_id.rpartition(".")[0]
        command = children.get(run_id)
    return command


def resolve(command: Intent, ended: ChildRunEnded, spend: Spend | None) -> None:
    """Settle a child's handle with its ending: its result, or ChildRunFailed. A budgeted child's
    calls join the parent's ``spend``: its budget counts what its children spent."""
    if spend is not None and ended.spend:
        for call in spend_from_json(ended.spend):
            spend.add(call)
    if ended.child_status == "completed":
        command.future.set_result(orjson.loads(ended.result or "null"))
        return
    command.future.set_exception(
        ChildRunFailed(
            ended.child_run_id, command.name, ended.child_status, ended.error_type or "", ended.error or ""
        )
    )
