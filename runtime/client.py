"""Submitting and following runs from a program; the CLI is a thin layer over this."""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import logging
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaException

from runtime.config import Settings, load_settings
from runtime.errors import AgentlogError
from runtime.log.kafka.access import check_access
from runtime.log.kafka.backend import KafkaLog
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import (
    CancelRequested,
    Command,
    Event,
    ModelCallScheduled,
    RunStarted,
    RunSubmitted,
    SignalSent,
)
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.payloads import PayloadMissing, inlined, read_back, read_blobs
from runtime.log.records.prompts import PromptMissing, RecordedInput, checked_args, rebuild_inputs
from runtime.log.records.run_index import RunLocation, parse_location, run_key
from runtime.log.records.status import has_ended
from runtime.log.schemas.datum import DecodeError, record_to_dict
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.submitter import SubmitterKeys
from runtime.replay.reset import SeedError, UncleanSeam, cut, encode_seed
from runtime.results import ResultTail
from runtime.run_status import LoggedEvent, RunStatus, summarize
from runtime.workflow.canonical import canonical_json
from runtime.workflow.compensation import RESERVED_SIGNAL_PREFIX

__all__ = ["Client", "LoggedEvent", "RunError", "RunStatus", "new_run_id", "summarize"]

logger = logging.getLogger("agentlog.client")


class RunError(AgentlogError):
    """The run did not complete; ``status`` (a RunState, or "timeout") and ``reason`` say why."""

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        super().__init__(f"run {run_id} {status}: {reason}")
        self.run_id, self.status, self.reason = run_id, status, reason


def new_run_id() -> str:
    """20 lowercase base32 characters: 100 random bits (more than 24 hex characters carried) in
    fewer bytes -- the id is the Kafka key of every record of the run."""
    return base64.b32encode(secrets.token_bytes(15)).decode("ascii")[:20].lower()


class Client:
    """Submit runs, signal and cancel them, read their status, history and result."""

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
        # Submissions are written at least once: the worker starts a run id once and ignores a
        # repeated submission (DESIGN.md; runtime.worker.continuation), so they need no idempotent
        # producer -- whose ProducerId request holds a fresh process's first record ~500 ms
        # (librdkafka retries it on a 500 ms timer once the bootstrap connection is replaced).
        # Signals keep ``log``'s idempotent producer: the worker delivers a repeated SignalSent
        # twice. Cancellations too (one producer for what must not repeat).
        self._submissions: EventLog = log if log is not None else KafkaLog(self.settings, idempotent=False)
        # The keys of the commands this client writes (runtime.log.sealing.submitter): through the
        # submissions' producer, just before the command, without an ack each, when the client
        # opened its own log; a client whose key store is its own (no serde given: a serde given may
        # be another's) follows the keys partitions it reads twice.
        sealer = self.serde.seal_over(self._submissions).sealer
        self._keys = (
            SubmitterKeys(sealer, own_producer=log is None, follow_reads=log is None and serde is None)
            if sealer is not None
            else None
        )
        self._closes_log = log is None
        self._wrote = False
        # Results pushed: one tail over the events partitions of the runs this client submitted,
        # each from where the partition ended before the client's first submission to it.
        self._results = ResultTail(self.log, self.serde, self.settings.events_topic)
        # Events-topic records the reads of this client went through, kept or skipped by key: what
        # a lookup in the run index saves (tests and benchmarks read it).
        self.events_records_read = 0

    # ------------------------------------------------------------------------------ commands

    def submit(
        self,
        workflow: str,
        input: Any,
        run_id: str | None = None,
        *,
        raw_input: str | None = None,
        subject: str | None = None,
    ) -> str:
        """Submit a run of ``workflow`` with ``input`` (JSON-able; ``raw_input``: JSON text as is).

        Produces one RunSubmitted record and returns the run id at once, without waiting for the
        broker (``flush`` or ``result`` waits). ``run_id``: the id to use (a new random one by
        default); a second submission of an id the worker already holds is ignored.
        ``subject``: the data subject the run is about (``seal_contents``): its contents are sealed
        under the subject's key, which ``agentlog erase --subject`` destroys for all its runs.
        Raises TypeError/ValueError if ``input`` is not JSON-able, KafkaException if the
        producer cannot take the record."""
        drawn = run_id is None
        run_id = run_id or new_run_id()
        if self._keys is not None:
            self._keys.for_submission(run_id, drawn=drawn, subject=subject)
        elif subject is not None:
            raise ValueError("submit(subject=...) needs a deployment that seals contents (seal_contents)")
        self._note_floor(run_id)
        text = raw_input if raw_input is not None else canonical_json(input)
        self._send(RunSubmitted(run_id=run_id, workflow=workflow, input=text))
        return run_id

    def fork(
        self,
        run_id: str,
        position: int,
        overrides: Mapping[str, Any] | None = None,
        new_id: str | None = None,
    ) -> str:
        """A new run from ``run_id``'s history before ``position`` that leaves ``run_id`` untouched
        (unlike ``reset``) and runs effecting tools dry: each is recorded as skipped, never called,
        so comparing the two runs never touches the world. The workflow sees ``overrides`` (e.g.
        ``{"model": "planner-v2"}``) as ``ctx.overrides``. Raises what ``reset`` raises."""
        return self.reset(run_id, position, new_id, fork_overrides=dict(overrides or {}))

    def reset(
        self,
        run_id: str,
        position: int,
        new_id: str | None = None,
        *,
        allow_in_doubt: bool = False,
        fork_overrides: dict[str, Any] | None = None,
    ) -> str:
        """A new run from ``run_id``'s recorded history before ``position`` (runtime.replay.reset): no
        call before it runs again, everything from it runs with the current code, and effects it
        repeats keep their idempotency keys. A still-running original is cancelled first.
        Returns the new run's id (produced at once, like ``submit``). Raises AgentlogError if the
        run has no RunStarted, ``position`` is outside its history, a stored result is missing,
        or the history before ``position`` is too large for one submission, and (``UncleanSeam``)
        if ``position`` cuts between a call's Scheduled record and its outcome -- unless
        ``allow_in_doubt``: the new run then executes that call again, in doubt (its status names
        it), with its recorded key."""
        logged = self._logged(run_id, self.location(run_id))
        started = next((e.event for e in logged if isinstance(e.event, RunStarted)), None)
        if started is None:
            raise AgentlogError(f"run {run_id} has no RunStarted in the log: nothing to reset")
        try:
            seed = encode_seed(
                cut(
                    self.with_payloads(run_id, [e.event for e in logged]),
                    position,
                    allow_in_doubt=allow_in_doubt,
                )
            )
        except UncleanSeam:
            raise
        except SeedError as error:
            raise AgentlogError(str(error)) from error
        if len(seed) > _SEED_LIMIT:
            raise AgentlogError(
                f"run {run_id} before position {position} is {len(seed)} bytes of history, over the "
                f"{_SEED_LIMIT}-byte limit of one submission: reset to an earlier position"
            )
        if fork_overrides is None and summarize(run_id, logged).status == "running":
            self.cancel(run_id, reason=f"reset to position {position}")
        new = new_id or new_run_id()
        self._note_floor(new)
        self._send(
            RunSubmitted(
                run_id=new,
                workflow=started.workflow,
                input=started.input,
                reset_from=run_id,
                reset_position=position,
                key_root=started.key_root or run_id,
                seed=seed,
                fork_overrides=None if fork_overrides is None else canonical_json(fork_overrides),
            )
        )
        return new

    def _note_floor(self, run_id: str) -> None:
        """Watch the run's events, on its partition from where it ended before the client's first
        submission to it: ``result`` need not read what came before."""
        partition = self.partition(run_id)
        start = self._results.started(partition)
        self._results.watch(run_id, partition, self._end_offset(partition) if start is None else start)

    def signal(self, run_id: str, name: str, payload: Any) -> None:
        """Send signal ``name`` with ``payload`` (JSON-able) to the run, and wait until the broker
        has it. A run that has ended ignores it. Raises KafkaException if it cannot be sent."""
        if name.startswith(RESERVED_SIGNAL_PREFIX):
            raise AgentlogError(
                f"signal name {name!r} is reserved (names starting {RESERVED_SIGNAL_PREFIX!r} are agentlog's own)"
            )
        self._learn_key_of(run_id)
        self._send(SignalSent(run_id=run_id, name=name, payload=canonical_json(payload)))
        self.flush()

    def _learn_key_of(self, run_id: str) -> None:
        """Before sealing a signal for a run this client did not submit (``seal_contents``): learn
        which key seals the run's contents (``SubmitterKeys.learn_key_of``) from the run's own
        first record -- its RunStarted where the run index locates it, else its submission in the
        commands topic (whose key may be a moment behind it: the decoding waits for it)."""
        if self._keys is None:
            return

        def from_run_started() -> None:
            location = self.location(run_id)
            if location is not None:  # decoding its RunStarted is what teaches the sealer
                next(self.events(run_id, start=location.first, end=location.first + 1), None)

        def from_submission() -> None:
            key = run_id.encode()
            for record in self.log.read(
                self.settings.commands_topic, self.partition(run_id), keep=lambda k: k == key
            ):
                if isinstance(self.serde.decode(record.value or b"", record.key), RunSubmitted):
                    break

        if not self._keys.learn_key_of(run_id, (from_run_started, from_submission)):
            raise AgentlogError(
                f"run {run_id}: no submission of it in {self.settings.commands_topic!r}, so the key its "
                "contents are sealed under is not known, and a signal is sealed under that key: submit "
                "the run first"
            )

    def cancel(self, run_id: str, reason: str = "cancelled by request") -> None:
        """Ask for the run to be cancelled with ``reason``, and wait until the broker has the
        request; the run ends "cancelled" when its worker takes it (a run that has ended ignores
        it). Raises KafkaException if it cannot be sent."""
        self._send(CancelRequested(run_id=run_id, reason=reason))
        self.flush()

    def _send(self, command: Command) -> None:
        """Append ``command``: a submission through the submissions' producer, a signal or
        cancellation through the idempotent one once the submissions sent before it are
        acknowledged -- so a run's signal never lands ahead of its submission."""
        via = self._submissions if isinstance(command, RunSubmitted) else self.log
        stamped = type(command)(
            **{**record_to_dict(command), "occurred_at": int(time.time() * 1000), "worker": self.identity}
        )
        if not self._wrote and self._closes_log:
            atexit.register(self.close)  # records still queued at exit are sent, not dropped
        if via is not self._submissions and self._wrote:
            self._submissions.flush()
        self._wrote = True
        via.append(self.settings.commands_topic, None, command.run_id.encode(), self.serde.encode(stamped))

    def flush(self) -> None:
        """Wait until every command sent so far is acknowledged by the log."""
        if self._wrote:
            self._submissions.flush()
            if self.log is not self._submissions:
                self.log.flush()
            if self._keys is not None:
                self._keys.settle()  # the submissions' keys (raises if one was not written)

    def close(self) -> None:
        """Stop following results, flush and close the log this client opened (not one it was
        given); safe to call twice. The client may be used again afterwards (it opens new
        connections)."""
        self._results.close()
        if self._keys is not None:
            self._keys.close()
        if self._closes_log:
            try:
                self._submissions.close()
            finally:
                self.log.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ reading
    def partition(self, run_id: str) -> int:
        """The partition of the commands and events topics that holds the run's records."""
        return partition_for(run_id, self.settings.partitions)

    def _end_offset(self, partition: int) -> int:
        return self.log.watermarks(self.settings.events_topic, partition)[1]

    def events(self, run_id: str, start: int | None = None, end: int | None = None) -> Iterator[LoggedEvent]:
        """The run's events in log order with their offsets and sizes, fenced (zombie) records
        left out; ``start``: the offset to read the partition from (default its beginning),
        ``end``: where to stop (default the end now).
        A record this code cannot decode is left out with a warning: the worker parks a run
        with such a record, naming its offset, so the run's status still says what is wrong.
        Raises KafkaException if the topic cannot be read."""
        partition = self.partition(run_id)
        key = run_id.encode()
        fence = FenceFilter()

        def keep(k: bytes | None) -> bool:
            self.events_records_read += 1
            return k == key or k is None

        for record in self.log.read(self.settings.events_topic, partition, start=start, end=end, keep=keep):
            if record.value is None:
                continue
            try:
                event = self.serde.decode(record.value, record.key)
            except DecodeError as error:
                logger.warning("run %s: record at offset %s left out: %s", run_id, record.offset, error)
                continue
            assert isinstance(event, Event)
            if not fence.admit(event, record.offset) or event.run_id != run_id:
                continue
            yield LoggedEvent(record.offset, len(record.value), event)

    def history(self, run_id: str, *, payloads: bool = False) -> list[dict[str, Any]]:
        """As ``agentlog history --json``: each event's fields plus ``type``, ``partition`` and
        ``offset``. ``payloads``: results stored out of line are read back and shown inline, and
        each ``ModelCallScheduled`` also gets ``messages``, its whole prompt rebuilt from the run's
        message sequence (``prompts``), or ``prompt_error`` saying why it could not be.
        An unknown run has an empty history. Raises AgentlogError if a stored result or message is
        missing (with ``payloads``), and what ``events`` raises."""
        partition = self.partition(run_id)
        logged = self._logged(run_id, self.location(run_id))
        events = [e.event for e in logged]
        prompts: dict[int, dict[str, Any]] = {}
        if payloads:
            events = self.with_payloads(run_id, events)
            prompts = self._prompt_fields(run_id, events)
        return [
            {
                "seq": event.seq,
                "type": event.type,
                **record_to_dict(event),
                "chain": event.chain.hex(),  # the link as hex text (runtime.log.records.chain): JSON has no bytes
                **(prompts.get(event.position, {}) if isinstance(event, ModelCallScheduled) else {}),
                "partition": partition,
                "offset": e.offset,
            }
            for e, event in zip(logged, events, strict=True)
        ]

    def prompts(self, run_id: str) -> dict[int, RecordedInput]:
        """Every model call's input, by position, rebuilt from the run's message sequence with the
        messages stored out of line read back (runtime.log.records.prompts). Raises AgentlogError if a
        stored message is missing or altered, or the sequence lacks a message a prompt names."""
        return self._inputs(run_id, [e.event for e in self._logged(run_id, self.location(run_id))])

    def _inputs(self, run_id: str, events: list[Event]) -> dict[int, RecordedInput]:
        try:
            blobs = read_blobs(self.log, self.settings.payloads_topic, events, self.serde.sealer)
            return rebuild_inputs(events, blobs)
        except (PayloadMissing, PromptMissing) as error:
            raise AgentlogError(f"run {run_id}: {error}") from error

    def _prompt_fields(self, run_id: str, events: list[Event]) -> dict[int, dict[str, Any]]:
        fields: dict[int, dict[str, Any]] = {}
        for position, recorded in self._inputs(run_id, events).items():
            try:
                fields[position] = {"messages": checked_args(recorded)["messages"]}
            except PromptMissing as error:
                fields[position] = {"messages": None, "prompt_error": str(error)}
        return fields

    def with_payloads(self, run_id: str, events: list[Event]) -> list[Event]:
        """``events`` with their out-of-line results read back (checked) and carried inline.
        Raises AgentlogError if a stored result is missing or does not match its checksum."""
        try:
            return inlined(
                events,
                read_back(
                    self.log, self.settings.payloads_topic, self.partition(run_id), events, self.serde.sealer
                ),
            )
        except PayloadMissing as error:
            raise AgentlogError(f"run {run_id}: {error}") from error

    def location(self, run_id: str) -> RunLocation | None:
        """Where the run index (runtime.log.records.run_index) says the run's records lie, or None if it
        does not locate the run: its entries on the run's partition of the compacted checkpoints
        topic, far smaller than the events partition. An entry with the ending's offset wins."""
        key = run_key(run_id)
        found: RunLocation | None = None
        for record in self.log.read(
            self.settings.checkpoints_topic, self.partition(run_id), keep=lambda k: k == key
        ):
            location = parse_location(record.value) if record.value is not None else None
            if location is not None and (found is None or found.end is None or location.end is not None):
                found = location
        return found

    def _logged(self, run_id: str, location: RunLocation | None, end: int | None = None) -> list[LoggedEvent]:
        """The run's events up to ``end``: read from its RunStarted's offset when ``location``
        gives one and the record there is that RunStarted (the run has no record before it), and
        only up to its ending event when ``location`` gives that too and the record there is one
        (the run has no record after it); else from the partition's start."""
        if location is not None:
            last = location.end if location.end is not None and (end is None or location.end < end) else None
            logged = list(self.events(run_id, start=location.first, end=end if last is None else last + 1))
            if (
                logged
                and logged[0].offset == location.first
                and isinstance(logged[0].event, RunStarted)
                and (
                    last is None
                    or (logged[-1].offset == last and has_ended(summarize(run_id, logged[-1:]).status))
                )
            ):
                return logged
            logger.warning(
                "run %s: the run index's %s does not hold where its records lie; scanning", run_id, location
            )
        return list(self.events(run_id, end=end))

    def _ending_at(self, run_id: str, location: RunLocation | None, end: int) -> LoggedEvent | None:
        """The run's ending event at the offset ``location`` gives, if the record there is one."""
        if location is None or location.end is None or location.end >= end:
            return None
        found = next(iter(self.events(run_id, start=location.end, end=location.end + 1)), None)
        if (
            found is not None
            and found.offset == location.end
            and has_ended(summarize(run_id, [found]).status)
        ):
            return found
        logger.warning(
            "run %s: the run index's offset %s is not its ending event; scanning", run_id, location.end
        )
        return None

    def status(self, run_id: str) -> RunStatus:
        """The run's status, size, in-doubt calls, re-decisions and outcome, read from its events
        (from its first record when the run index locates it, else the whole partition is
        scanned). A run id the log does not hold has status "unknown".
        Raises KafkaException if the events topic cannot be read, DecodeError on a record this
        code cannot decode."""
        return summarize(run_id, self._logged(run_id, self.location(run_id)))

    def result(self, run_id: str, timeout: float = 60.0, *, follow: bool = False) -> Any:
        """Wait for the run to end and return its result (decoded JSON).

        The answer is pushed: the client's tail over its runs' partitions (``runtime.results``)
        reads the ending event as it is written. A run this client did not submit is read once
        from its partition's start, then watched the same way.
        ``follow``: a run that continued as new is followed along its chain (``ctx.continue_as_new``)
        to the last run, whose result is returned; ``timeout`` covers the whole chain.
        Raises RunError if it ended otherwise (``status`` failed, cancelled, parked, rejected or,
        without ``follow``, continued_as_new, with the reason), or with status "timeout" if it is
        still running (or not started) after ``timeout`` seconds -- saying which worker the
        workers' group has given its partition to, or that none has."""
        self.flush()
        deadline = time.monotonic() + timeout
        while True:
            future = self._ending(run_id)
            try:
                ending = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                self._results.forget(run_id, future)
                raise self._timed_out(run_id, timeout) from None
            value, successor = self._conclude(run_id, ending, follow)
            if successor is None:
                return value
            run_id = successor

    async def wait(self, run_id: str, timeout: float = 60.0, *, follow: bool = False) -> Any:
        """``result`` for asyncio programs: the same answer, awaited without a thread per waiter."""
        await asyncio.to_thread(self.flush)
        deadline = time.monotonic() + timeout
        while True:
            future = await asyncio.to_thread(self._ending, run_id)
            try:
                ending = await asyncio.wait_for(
                    asyncio.wrap_future(future), max(0.0, deadline - time.monotonic())
                )
            except TimeoutError:
                self._results.forget(run_id, future)
                raise await asyncio.to_thread(self._timed_out, run_id, timeout) from None
            value, successor = self._conclude(run_id, ending, follow)
            if successor is None:
                return value
            run_id = successor

    def results(self, run_ids: Iterable[str], timeout: float = 60.0) -> dict[str, Any]:
        """Wait for many runs at once; their results by run id, in the order given. ``timeout``
        covers them all. Raises RunError for the first run, in that order, that did not complete."""
        self.flush()
        deadline = time.monotonic() + timeout
        futures = {run_id: self._ending(run_id) for run_id in run_ids}
        concurrent.futures.wait(list(futures.values()), timeout=max(0.0, deadline - time.monotonic()))
        answers: dict[str, Any] = {}
        for run_id, future in futures.items():
            if not future.done():
                for other, waiting in futures.items():
                    self._results.forget(other, waiting)
                raise self._timed_out(run_id, timeout)
            answers[run_id] = self._conclude(run_id, future.result(), False)[0]
        return answers

    def _ending(self, run_id: str) -> concurrent.futures.Future[LoggedEvent]:
        """A future of the run's ending event. A run this client did not submit (or whose key the
        tail dropped) is watched first, so the tail decodes its records from where it is now on,
        then its partition is read up to its end, which lies at or beyond that position: between
        the two, no record of the run is missed, even if the run ended long ago. The read is
        only of the ending event when the run index locates it, and otherwise starts at the run's
        RunStarted when the index locates that (no record of the run lies before it)."""
        partition = self.partition(run_id)
        start = self._results.started(partition)
        if start is None or not self._results.is_watched(run_id):
            self._results.watch(run_id, partition, self._end_offset(partition) if start is None else start)
            end = self._end_offset(partition)
            location = self.location(run_id)
            ending = self._ending_at(run_id, location, end) or next(
                (e for e in self._logged(run_id, location, end) if has_ended(summarize(run_id, [e]).status)),
                None,
            )
            if ending is not None:
                done: concurrent.futures.Future[LoggedEvent] = concurrent.futures.Future()
                done.set_result(ending)
                return done
        return self._results.ending(run_id)

    def _conclude(self, run_id: str, ending: LoggedEvent, follow: bool) -> tuple[Any, str | None]:
        """(the result, None) of a completed run, (None, successor) of one that continued as new
        and is followed; RunError otherwise."""
        summary = summarize(run_id, [ending])
        if summary.status == "completed":
            return summary.result, None
        if follow and summary.continued_as is not None:
            return None, summary.continued_as
        raise RunError(run_id, summary.status, summary.reason or "")

    def _timed_out(self, run_id: str, timeout: float) -> RunError:
        """The timeout, with the run's status and whether any worker holds its partition."""
        partition = self.partition(run_id)
        status = summarize(run_id, list(self.events(run_id, start=self._results.started(partition)))).status
        try:
            owner = self.log.commands_owner(partition)
        except KafkaException as error:
            held = f"whether a worker holds partition {partition} is unknown ({error})"
        else:
            held = (
                f"no worker of group {self.settings.worker_group!r} holds its partition {partition}"
                if owner is None
                else f"its partition {partition} is assigned to worker {owner!r}"
            )
        return RunError(run_id, "timeout", f"not finished after {timeout}s (status {status}); {held}")


# A submission is one Kafka record (1 MB by default); the seed leaves room for the rest.
_SEED_LIMIT = 900_000
