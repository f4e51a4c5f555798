"""The client: submits runs and hands out a handle on each (runtime.client.handle)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator, Generator, Iterable
from typing import Any

from runtime.client.commands import CommandWriter, new_run_id
from runtime.client.endings import Endings
from runtime.client.handle import RunHandle
from runtime.client.reading import RunReader
from runtime.client.streaming import Since
from runtime.config import Settings, load_settings
from runtime.log.kafka.access import check_access
from runtime.log.kafka.backend import KafkaLog
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import RunSubmitted
from runtime.log.records.stream import StreamEvent
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.submitter import SubmitterKeys
from runtime.schedules import Schedules, ScheduleStore
from runtime.workflow.budget import Budget, BudgetError
from runtime.workflow.canonical import canonical_json
from runtime.workflow.deadlines import absolute_ms


class Client:
    """Submit runs and get a handle on any run (``run``): its result, status, history, signals,
    cancellation, reset and fork. Wait for many runs at once with ``results``."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        identity: str = "client",
        log: EventLog | None = None,
        serde: Serde | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self.serde = serde or Serde(self.settings)
        self.identity = identity
        # The log is Kafka unless given (runtime.local passes the in-memory one). On a cluster with
        # an authorizer, a user without the submitter's permissions is told so here, in one line.
        if log is None:
            check_access(self.settings, "submitter")
        self.log: EventLog = log if log is not None else KafkaLog(self.settings)
        # Submissions go through a producer of their own (CommandWriter says why).
        submissions: EventLog = log if log is not None else KafkaLog(self.settings, idempotent=False)
        # The keys of the commands this client writes (runtime.log.sealing.submitter): through the
        # submissions' producer, just before the command, without an ack each, when the client
        # opened its own log; a client whose key store is its own (no serde given: a serde given may
        # be another's) follows the keys partitions it reads twice.
        sealer = self.serde.seal_over(submissions).sealer
        keys = (
            SubmitterKeys(sealer, own_producer=log is None, follow_reads=log is None and serde is None)
            if sealer is not None
            else None
        )
        self._writer = CommandWriter(
            self.settings,
            identity,
            self.serde,
            self.log,
            submissions,
            keys=keys,
            closes_log=log is None,
            at_exit=self.close,
        )
        self._reader = RunReader(self.settings, self.log, self.serde)
        self._endings = Endings(self._reader, self._writer.flush)
        self._schedules: Schedules | None = None

    @property
    def events_records_read(self) -> int:
        """Events-topic records the reads of this client went through, kept or skipped by key:
        what a lookup in the run index saves (tests and benchmarks read it)."""
        return self._reader.records_read

    def submit(
        self,
        workflow: str,
        input: Any,
        run_id: str | None = None,
        *,
        raw_input: str | None = None,
        subject: str | None = None,
        budget: Budget | None = None,
        deadline: dt.datetime | dt.timedelta | float | None = None,
    ) -> RunHandle:
        """Submit a run of ``workflow`` with ``input`` (JSON-able; ``raw_input``: JSON text as is).

        Produces one RunSubmitted record and returns the run's handle at once, without waiting for
        the broker (``flush`` or ``result`` waits). ``run_id``: the id to use (a new random one by
        default); a second submission of an id the worker already holds is ignored.
        ``subject``: the data subject the run is about (``seal_contents``): its contents are sealed
        under the subject's key, which ``agentlog erase --subject`` destroys for all its runs.
        ``budget``: what the run may spend on its model, in place of its workflow's default
        (runtime.workflow.budget); recorded with the submission.
        ``deadline``: a time (timezone-aware) or a duration from now (timedelta or seconds) at which
        the run is cancelled if it has not ended (the workflow's own deadline binds if earlier:
        runtime.workflow.deadlines); DeadlineError if it is past or not a positive duration.
        Raises TypeError/ValueError if ``input`` is not JSON-able, KafkaException if the
        producer cannot take the record."""
        if budget is not None and not isinstance(budget, Budget):
            raise BudgetError(f"budget must be a Budget, got {budget!r}")
        at = None if deadline is None else absolute_ms(deadline, int(time.time() * 1000))
        drawn = run_id is None
        run_id = run_id or new_run_id()
        self._writer.choose_key(run_id, drawn=drawn, subject=subject)
        self._endings.note_floor(run_id)
        text = raw_input if raw_input is not None else canonical_json(input)
        recorded = None if budget is None else budget.to_json()
        self._writer.send(
            RunSubmitted(run_id=run_id, workflow=workflow, input=text, budget=recorded, deadline=at)
        )
        return self.run(run_id)

    @property
    def schedules(self) -> Schedules:
        """The deployment's schedules: ``add``, ``list``, ``get``, ``pause``, ``resume``, ``delete``
        (docs/schedules.md). Each change is acknowledged by the log when the call returns."""
        if self._schedules is None:
            counts = self.log.partition_count if isinstance(self.log, KafkaLog) else None
            store = ScheduleStore(
                self.settings, self.log, self.serde, identity=self.identity, partition_count=counts
            )
            self._schedules = Schedules(store)
        return self._schedules

    def run(self, run_id: str) -> RunHandle:
        """The handle on run ``run_id`` (nothing is read until one of its methods asks)."""
        return RunHandle(run_id, self._writer, self._reader, self._endings)

    def stream(self, run_id: str, since: Since = "start") -> Generator[StreamEvent, None, None]:
        """``client.run(run_id).stream(since)``: what the run does, as it happens (RunHandle.stream)."""
        return self.run(run_id).stream(since)

    def astream(self, run_id: str, since: Since = "start") -> AsyncIterator[StreamEvent]:
        """``stream`` for asyncio programs (RunHandle.astream)."""
        return self.run(run_id).astream(since)

    def query(self, run_id: str, name: str) -> Any:
        """``client.run(run_id).query(name)``: the latest value the run exposed under ``name``."""
        return self.run(run_id).query(name)

    def results(self, run_ids: Iterable[str], timeout: float = 60.0) -> dict[str, Any]:
        """Wait for many runs at once; their results by run id, in the order given. ``timeout``
        covers them all. Raises RunError for the first run, in that order, that did not complete."""
        return self._endings.results(run_ids, timeout)

    def flush(self) -> None:
        """Wait until every command sent so far is acknowledged by the log."""
        self._writer.flush()

    def close(self) -> None:
        """Stop following results, flush and close the log this client opened (not one it was
        given); safe to call twice. The client may be used again afterwards (it opens new
        connections)."""
        self._endings.close()
        self._writer.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
