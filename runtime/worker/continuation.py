"""Continue-as-new: starting the run a ``RunContinuedAsNew`` names, exactly once.

The successor's id is deterministic (recorded in ``RunContinuedAsNew.new_run_id``), and its
commands partition may belong to another worker, so the successor is started the portable way: a
``RunSubmitted`` (with ``continued_from``) is produced to the commands topic, keyed by the new id.
Exactly once = at least once submission + idempotent start: a worker ignores a submission whose
run id its partition already knows (the run index), so a repeated submission starts nothing.

Order:
1. the old run's ``RunContinuedAsNew`` is appended and acknowledged (a submission never precedes
   the record that decides it: a lost record is re-decided by replay, perhaps differently);
2. the submission is produced; until it is acknowledged the old run stays in
   ``OwnedPartition.continuing`` and every checkpoint lists it, so a rebuild reads its events;
3. a rebuild that finds a ``RunContinuedAsNew`` in what it reads submits again (a duplicate at
   worst). A crash between 1 and 2 therefore ends with the successor started once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import RunContinuedAsNew, RunSubmitted
from runtime.log.records.sealed_form import SUBJECT_PREFIX
from runtime.log.schemas.serde import Serde
from runtime.worker.partition import OwnedPartition

log = logging.getLogger("agentlog.worker")


class Continuer:
    """Submits the successors of runs that continued as new."""

    def __init__(self, settings: Settings, serde: Serde, log: EventLog, fail: Callable[[str], None]) -> None:
        self.settings = settings
        self.serde = serde
        self.log = log
        self.fail = fail  # the worker stops on it; a restarted worker submits again

    def after(
        self,
        owned: OwnedPartition,
        ended: RunContinuedAsNew,
        workflow: str,
        durable: asyncio.Future[int] | None,
        child_of: str | None = None,
    ) -> None:
        """Submit ``ended``'s successor once ``durable`` (the ack of its record) resolves.
        ``child_of``: a child run's parent, whose child the successor is too (runtime.worker.children)."""
        owned.continuing.add(ended.run_id)
        # Now, while the ended run's key id is known: the worker forgets it as the run ends.
        key_id = self.serde.sealer.key_id_for(ended.run_id) if self.serde.sealer is not None else None
        if durable is None:
            self.submit(owned, ended, workflow, key_id, child_of)
            return

        def acked(future: asyncio.Future[int]) -> None:
            if future.cancelled() or future.exception() is not None or owned.lost:
                return  # not durable: the worker stops on it, and a rebuild decides again
            self.submit(owned, ended, workflow, key_id, child_of)

        durable.add_done_callback(acked)

    def submit(
        self,
        owned: OwnedPartition,
        ended: RunContinuedAsNew,
        workflow: str,
        key_id: str | None = None,
        child_of: str | None = None,
    ) -> None:
        """Produce the successor's RunSubmitted (``ended`` is durable). ``key_id``: the key the
        ended run's contents are sealed under (by default the one its records named). A data
        subject's run continues under the subject's key -- the successor carries the subject's
        contents on, and ``erase --subject`` must reach it; a run's own key is its own, so each
        run of a chain gets one (as a fork does)."""
        owned.continuing.add(ended.run_id)
        sealer = self.serde.sealer
        if sealer is not None:
            key_id = key_id or sealer.key_id_for(ended.run_id)
            if key_id.startswith(SUBJECT_PREFIX):
                sealer.use_subject(ended.new_run_id, key_id[len(SUBJECT_PREFIX) :])
        command = RunSubmitted(
            run_id=ended.new_run_id,
            occurred_at=int(time.time() * 1000),
            worker=owned.stamp.worker,
            workflow=workflow,
            input=ended.input,
            continued_from=ended.run_id,
            child_of=child_of,
        )
        try:
            value = self.serde.encode(command)
            sent = self.log.append(self.settings.commands_topic, None, ended.new_run_id.encode(), value)
        except Exception as error:  # e.g. an unregistered schema: stop, a restart submits again
            self.fail(
                f"run {ended.run_id}: the submission of its successor {ended.new_run_id} failed: {error}"
            )
            return
        loop = asyncio.get_running_loop()

        def delivered(future: Future[int]) -> None:
            loop.call_soon_threadsafe(self._delivered, owned, ended, future)

        sent.add_done_callback(delivered)

    def _delivered(self, owned: OwnedPartition, ended: RunContinuedAsNew, future: Future[int]) -> None:
        error = future.exception()
        if error is not None:
            self.fail(
                f"run {ended.run_id}: the submission of its successor {ended.new_run_id} failed: {error}"
            )
            return
        owned.continuing.discard(ended.run_id)
        owned.located.discard(ended.run_id)  # no longer listed as active: nothing to keep it for
        if ended.run_id not in owned.runs:
            owned.first_offsets.pop(ended.run_id, None)
        log.info(
            json.dumps({"event": "continued_as_new", "run": ended.run_id, "successor": ended.new_run_id})
        )
