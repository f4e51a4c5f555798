"""Child runs, the worker's side: a child submitted, its ending sent to its parent, a parent's
children cancelled when it ends (runtime.workflow.children has the workflow's side).

Nothing here is a Kafka transaction (the workers write with idempotent producers: DESIGN.md,
"Exactly-once"); each message is sent once the record that decides it is durable, and sent again
from the log after a crash, so it arrives at least once -- and its receiver makes a repeat harmless:
1. **A child's start.** The parent's ``ChildRunScheduled`` is acknowledged, then the child's
   ``RunSubmitted`` (``child_of`` = the parent) is produced to the child's commands partition. A
   crash between the two: the parent is replayed (it was not listed as waiting: below) and its
   child command, recorded with no ending, is carried out again. The child's partition ignores a
   submission of an id it knows (runtime.worker.commands), so the child starts once. While a
   run's submissions are not acknowledged it does not count as waiting (``OwnedPartition.
   child_sends``): a checkpoint would otherwise index it without replay, and nothing would send again.
2. **A child's end.** The child's ending record (completed, failed, cancelled) is acknowledged,
   then a ``ChildEnded`` command is produced, keyed by the parent's id. Until it is acknowledged
   the child stays listed in checkpoints (``OwnedPartition.continuing``, as a run that continued as
   new does), so a rebuild reads its ending and sends again (``follow_ups``). The parent records a
   ``ChildRunEnded`` for the first and ignores a repeat (runtime.workflow.machine).
3. **The parent-close policy.** A run's ending acknowledged, each child it started with policy
   ``cancel`` that has not ended gets a ``CancelRequested`` naming the parent -- hooked on the
   ending records, so it holds whatever ended the run (its code, a client's cancel, a deadline);
   sent again from the log as in 2. A cancel of a run that has ended is ignored by its worker.
A handle's ``signal`` / ``cancel`` (``ChildRunSignalled``) is sent once its record is acknowledged;
a crash in between loses it (it is not sent again: a signal is not idempotent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import (
    CancelRequested,
    ChildEnded,
    ChildRunEnded,
    ChildRunScheduled,
    Command,
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunSubmitted,
    SignalSent,
)
from runtime.log.records.sealed_form import SUBJECT_PREFIX
from runtime.log.schemas.serde import Serde
from runtime.worker.partition import OwnedPartition
from runtime.workflow.activation import RunInstance, RunView
from runtime.workflow.budget import CallSpend, spend_json
from runtime.workflow.children import CHILD, CHILD_SIGNAL
from runtime.workflow.intents import Intent

log = logging.getLogger("agentlog.worker")

SENT_BY_CHILDREN = (CHILD, CHILD_SIGNAL)  # the intents this module carries out


def ending_command(parent_run_id: str, ending: Event, spend: str | None = None) -> ChildEnded | None:
    """The ``ChildEnded`` a child's ending record sends its parent (``spend``: a budgeted child's
    calls, runtime.workflow.budget.spend_json); None for an ending that is not one (a park: an
    operator decides; a continue-as-new: not followed to the successor)."""
    child = ending.run_id
    if isinstance(ending, RunCompleted):
        return ChildEnded(
            run_id=parent_run_id,
            child_run_id=child,
            child_status="completed",
            result=ending.result,
            spend=spend,
        )
    if isinstance(ending, RunFailed):
        return ChildEnded(
            run_id=parent_run_id,
            child_run_id=child,
            child_status="failed",
            error_type=ending.error_type,
            error=ending.error,
            spend=spend,
        )
    if isinstance(ending, RunCancelled):
        return ChildEnded(
            run_id=parent_run_id,
            child_run_id=child,
            child_status="cancelled",
            error_type="RunCancelled",
            error=ending.reason,
            spend=spend,
        )
    return None


def rejection_command(parent_run_id: str, child_run_id: str, reason: str) -> ChildEnded:
    """What a child's rejected submission sends its parent."""
    return ChildEnded(
        run_id=parent_run_id,
        child_run_id=child_run_id,
        child_status="rejected",
        error_type="RunRejected",
        error=reason,
    )


def cancel_command(child_run_id: str, parent_run_id: str, parent_status: str) -> CancelRequested:
    return CancelRequested(
        run_id=child_run_id, reason=f"parent run {parent_run_id} {parent_status} (parent_close=cancel)"
    )


def follow_ups(history: Sequence[Event], ending: Event) -> list[Command]:
    """The messages a run's ending sends, from its recorded history (a rebuild's path): its end to
    its parent, and a cancel to each child it started with policy ``cancel`` that had not ended."""
    status = ending_status(ending)
    if status is None:
        return []
    started = history[0] if history else None
    sent: list[Command] = []
    if isinstance(started, RunStarted) and started.child_of:
        notice = ending_command(started.child_of, ending, history_spend(history) if started.budget else None)
        if notice is not None:
            sent.append(notice)
    ended = {e.child_run_id for e in history if isinstance(e, ChildRunEnded)}
    for event in history:
        if (
            isinstance(event, ChildRunScheduled)
            and event.parent_close == "cancel"
            and event.child_run_id not in ended
        ):
            sent.append(cancel_command(event.child_run_id, ending.run_id, status))
    return sent


def history_spend(history: Sequence[Event]) -> str:
    """A budgeted run's calls as its recorded history tells them (a rebuild's path): each completed
    model call priced by the model it reported, then its registered name (the live path also has
    the call's ``model`` parameter, which the record keeps only inside its params)."""
    models = {e.position: e.model for e in history if isinstance(e, ModelCallScheduled)}
    return spend_json(
        [
            CallSpend(
                (e.response_model, None, models.get(e.position, "")),
                e.occurred_at,
                e.input_tokens or 0,
                e.output_tokens or 0,
                e.cached_tokens or 0,
            )
            for e in history
            if isinstance(e, ModelCallCompleted)
        ]
    )


def ending_status(ending: Event) -> str | None:
    """The parent's status an ending closes its children with; None for a park or a continue-as-new."""
    if isinstance(ending, RunCompleted):
        return "completed"
    if isinstance(ending, RunFailed):
        return "failed"
    if isinstance(ending, RunCancelled):
        return "cancelled"
    return None


class ChildLinks:
    """Sends what child runs exchange: submissions, signals, endings, parent-close cancels."""

    def __init__(
        self,
        settings: Settings,
        serde: Serde,
        log: EventLog,
        fail: Callable[[str], None],
        retouch: Callable[[OwnedPartition, str], None],
    ) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self.fail = fail  # the worker stops on it; its successor sends again from the log
        self.retouch = retouch  # a run whose sends are all acknowledged may wait (be evicted) again

    # ------------------------------------------------------------------ a parent's commands
    def note_issued(self, owned: OwnedPartition, run_id: str, intents: Sequence[Intent]) -> None:
        """Count the run's child starts about to be sent: until acknowledged, it is not waiting."""
        starts = sum(1 for intent in intents if intent.kind == CHILD)
        if starts:
            owned.child_sends[run_id] = owned.child_sends.get(run_id, 0) + starts

    def carry_out(self, owned: OwnedPartition, run: RunInstance, intent: Intent) -> None:
        """Send what a child command asks for; its record is durable (the executor waited for it)."""
        parent = run.view.run_id
        assert intent.key is not None  # the child's id
        if not run.view.active and (intent.kind != CHILD or intent.args["parent_close"] == "cancel"):
            return  # the run ended meanwhile: its policy says this child is not to run
        command: Command
        if intent.kind == CHILD:
            command = RunSubmitted(
                run_id=intent.key,
                workflow=intent.name,
                input=intent.args["input"],
                child_of=parent,
                # A budgeted parent's child is budgeted too (its calls counted, then added to the
                # parent's spend when it ends); bound by the parent's budget, not by what is left of it.
                budget=run.view.spend.budget.to_json() if run.view.spend is not None else None,
                # A fork's child runs dry too (its effects recorded as skipped): a fork never acts.
                fork_overrides="{}" if run.view.dry_run else None,
            )
        elif intent.args["cancel"]:
            command = CancelRequested(run_id=intent.key, reason=f"{intent.name} (by parent run {parent})")
        else:
            command = SignalSent(run_id=intent.key, name=intent.name, payload=intent.args["payload"])
        counted = intent.kind == CHILD
        self._same_key(parent, intent.key)  # a child's contents under its parent's subject
        self._send(owned, command, parent, lambda: self._submitted(owned, parent) if counted else None)

    def _submitted(self, owned: OwnedPartition, run_id: str) -> None:
        left = owned.child_sends.get(run_id, 0) - 1
        if left > 0:
            owned.child_sends[run_id] = left
            return
        owned.child_sends.pop(run_id, None)
        self.retouch(owned, run_id)

    # ------------------------------------------------------------------ a run's end
    def after_end(
        self,
        owned: OwnedPartition,
        run: RunInstance,
        view: RunView,
        events: Sequence[Event],
        durable: asyncio.Future[int] | None,
    ) -> bool:
        """Send what ``run``'s ending (in ``events``) asks for once it is acknowledged; True if there
        is something to send: the run then stays listed in checkpoints until it is sent."""
        owned.child_sends.pop(view.run_id, None)
        ending = next((e for e in reversed(events) if ending_status(e) is not None), None)
        if ending is None:
            return False
        status = ending_status(ending)
        assert status is not None
        sent: list[Command] = []
        if view.parent_run_id:
            spend = spend_json(view.spend.calls) if view.spend is not None else None
            notice = ending_command(view.parent_run_id, ending, spend)
            if notice is not None:
                sent.append(notice)
        for child, policy in run.open_children():
            if policy == "cancel":
                sent.append(cancel_command(child, view.run_id, status))
        if not sent:
            return False
        if view.parent_run_id:
            self._same_key(view.run_id, view.parent_run_id)  # its ending sealed under the parent's subject
        self.resend(owned, view.run_id, sent, durable)
        return True

    def resend(
        self,
        owned: OwnedPartition,
        run_id: str,
        commands: Sequence[Command],
        durable: asyncio.Future[int] | None = None,
    ) -> None:
        """Send ``commands`` for the ended run ``run_id`` once ``durable`` (its ending's ack)
        resolves; the run stays listed as active (``continuing``) until every one is acknowledged."""
        owned.continuing.add(run_id)
        left = [len(commands)]

        def one_sent() -> None:
            left[0] -= 1
            if left[0] == 0 and run_id in owned.continuing:
                owned.continuing.discard(run_id)
                owned.located.discard(run_id)
                if run_id not in owned.runs:
                    owned.first_offsets.pop(run_id, None)
                    owned.forget(run_id)

        def send_all() -> None:
            for command in commands:
                self._send(owned, command, run_id, one_sent)

        if durable is None:
            send_all()
            return

        def acked(future: asyncio.Future[int]) -> None:
            if future.cancelled() or future.exception() is not None or owned.lost:
                return  # not durable: the worker stops on it, and a rebuild decides again
            send_all()

        durable.add_done_callback(acked)

    def rejected(self, parent_run_id: str, child_run_id: str, reason: str) -> None:
        """A child's submission was rejected by this worker: its parent hears of it (best effort:
        sent at once, not again after a crash)."""
        command = rejection_command(parent_run_id, child_run_id, reason)
        try:
            self.log.append(
                self.settings.commands_topic, None, parent_run_id.encode(), self.serde.encode(command)
            )
        except Exception as error:  # an unregistered schema, a closed producer: the worker stops
            self.fail(
                f"child run {child_run_id}: its rejection could not be sent to {parent_run_id}: {error}"
            )

    # ------------------------------------------------------------------ sending
    def _same_key(self, run_id: str, other: str) -> None:
        """Seal ``other``'s contents here under ``run_id``'s data subject's key, if it has one (a
        data subject's run starts children about the same subject: ``erase --subject`` reaches
        them, as a continue-as-new does); a run's own key stays its own."""
        sealer = self.serde.sealer
        if sealer is not None and (key_id := sealer.key_id_for(run_id)).startswith(SUBJECT_PREFIX):
            sealer.use_subject(other, key_id[len(SUBJECT_PREFIX) :])

    def _send(self, owned: OwnedPartition, command: Command, about: str, done: Callable[[], None]) -> None:
        object.__setattr__(command, "occurred_at", int(time.time() * 1000))
        object.__setattr__(command, "worker", owned.stamp.worker)
        try:
            value = self.serde.encode(command)
            sent = self.log.append(self.settings.commands_topic, None, command.run_id.encode(), value)
        except Exception as error:  # e.g. an unregistered schema: stop, the successor sends again
            self.fail(f"run {about}: its {command.type} for {command.run_id} could not be sent: {error}")
            return
        loop = asyncio.get_running_loop()

        def delivered(future: Future[int]) -> None:  # in the producer's thread
            loop.call_soon_threadsafe(self._delivered, owned, command, about, future, done)

        sent.add_done_callback(delivered)

    def _delivered(
        self,
        owned: OwnedPartition,
        command: Command,
        about: str,
        future: Future[int],
        done: Callable[[], None],
    ) -> None:
        error = future.exception()
        if error is not None:
            self.fail(f"run {about}: its {command.type} for {command.run_id} was not acknowledged: {error}")
            return
        log.info(
            json.dumps({"event": "child_link_sent", "run": about, "type": command.type, "to": command.run_id})
        )
        if not owned.lost:
            done()
