"""A handle on one run: what a program does with a run it submitted or names (Temporal's
``client.get_workflow_handle(id)``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Generator, Iterator, Mapping
from typing import Any

from runtime.client.commands import CommandWriter, new_run_id
from runtime.client.endings import Endings
from runtime.client.queries import query
from runtime.client.reading import RunReader
from runtime.client.resets import seeded_submission
from runtime.client.streaming import Since, stream_run
from runtime.errors import AgentlogError
from runtime.log.records.events import CancelRequested, Event, SignalSent
from runtime.log.records.prompts import RecordedInput
from runtime.log.records.run_index import RunLocation
from runtime.log.records.status import ENDED
from runtime.log.records.stream import StreamEvent
from runtime.run_status import LoggedEvent, RunStatus
from runtime.workflow.canonical import canonical_json
from runtime.workflow.compensation import RESERVED_SIGNAL_PREFIX
from runtime.workflow.whatif_change import WhatifChange


class RunAlreadyEnded(AgentlogError):
    """A cancel of a run that has ended: nothing was sent; ``status`` and ``reason`` say how it ended."""

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        super().__init__(
            f"run {run_id} has ended ({status}{': ' + reason if reason else ''}): nothing to cancel"
        )
        self.run_id, self.status, self.reason = run_id, status, reason


class RunHandle:
    """One run of a client, by id: ``client.submit(...)`` returns one, ``client.run(run_id)``
    makes one for any run id (nothing is read until a method asks). Cheap: a handle holds the
    client's writer, reader and endings, nothing of its own but the id."""

    __slots__ = ("_endings", "_reader", "_writer", "run_id")

    def __init__(self, run_id: str, writer: CommandWriter, reader: RunReader, endings: Endings) -> None:
        self.run_id = run_id
        self._writer, self._reader, self._endings = writer, reader, endings

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    @property
    def partition(self) -> int:
        """The partition of the commands and events topics that holds the run's records."""
        return self._reader.partition(self.run_id)

    # ------------------------------------------------------------------------------ watching
    def stream(self, since: Since = "start") -> Generator[StreamEvent, None, None]:
        """What the run does, as it happens (runtime.client.streaming): its recorded steps, then
        its live ones -- calls started, a model's deltas as they form, outcomes, waits -- until it
        ends. ``since``: "start" (its whole history first), "current" (the steps in progress first)
        or "now" (only what happens from now on). A reader joining late sees each step once; an
        attempt a retry or a crash replaced is marked ``superseded``. Raises UnknownRun at once for
        a run never submitted."""
        self._writer.flush()  # a run this client just submitted is found
        return stream_run(self._reader.settings, self._reader, self.run_id, since)

    async def astream(self, since: Since = "start") -> AsyncIterator[StreamEvent]:
        """``stream`` for asyncio programs: each event awaited (the reading runs in a thread)."""
        events = await asyncio.to_thread(self.stream, since)
        try:
            while (event := await asyncio.to_thread(next, events, None)) is not None:
                yield event
        finally:
            # cancelled mid-read, its thread still holds it (ValueError): closed when collected
            with contextlib.suppress(ValueError):
                events.close()

    def query(self, name: str) -> Any:
        """The latest value the run exposed under ``name`` (``ctx.expose``), at once, without
        waiting for the run or signalling it (runtime.client.queries). Raises UnknownRun for a run
        never submitted, QueryError naming the names it exposes for another name."""
        self._writer.flush()  # a run this client just submitted is found, as ``stream`` finds it
        return query(self._reader, self.run_id, name)

    # ------------------------------------------------------------------------------ waiting
    def result(self, timeout: float = 60.0, *, follow: bool = False) -> Any:
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
        return self._endings.result(self.run_id, timeout, follow=follow)

    async def wait(self, timeout: float = 60.0, *, follow: bool = False) -> Any:
        """``result`` for asyncio programs: the same answer, awaited without a thread per waiter."""
        return await self._endings.wait(self.run_id, timeout, follow=follow)

    # ------------------------------------------------------------------------------ commands
    def signal(self, name: str, payload: Any) -> None:
        """Send signal ``name`` with ``payload`` (JSON-able) to the run, and wait until the broker
        has it. A run that has ended ignores it. Raises KafkaException if it cannot be sent.
        With ``seal_contents``, the payload is sealed under the key the run's contents are under,
        learnt from the run's first record if this client did not submit it."""
        if name.startswith(RESERVED_SIGNAL_PREFIX):
            raise AgentlogError(
                f"signal name {name!r} is reserved (names starting {RESERVED_SIGNAL_PREFIX!r} are agentlog's own)"
            )
        reader, run_id = self._reader, self.run_id
        self._writer.learn_key_of(
            run_id, (lambda: reader.decode_run_started(run_id), lambda: reader.decode_submission(run_id))
        )
        self._writer.send(SignalSent(run_id=self.run_id, name=name, payload=canonical_json(payload)))
        self._writer.flush()

    def cancel(self, reason: str = "cancelled by request") -> None:
        """Ask for the run to be cancelled with ``reason``, and wait until the broker has the
        request. Its worker raises RunCancelledError at the workflow's await (code may catch it to
        clean up), stops its calls in flight, runs its compensations and ends it "cancelled"
        (runtime.workflow.cancellation). Raises RunAlreadyEnded, sending nothing, if the run has
        ended (one that ends between that check and the request ignores it), KafkaException if
        the request cannot be sent."""
        status = self.status()
        if status.status in ENDED:
            raise RunAlreadyEnded(self.run_id, status.status, status.reason or "")
        self._writer.send(CancelRequested(run_id=self.run_id, reason=reason))
        self._writer.flush()

    def reset(self, position: int, new_id: str | None = None, *, allow_in_doubt: bool = False) -> RunHandle:
        """A new run from this run's recorded history before ``position`` (runtime.replay.reset):
        no call before it runs again, everything from it runs with the current code, and effects
        it repeats keep their idempotency keys. A still-running original is cancelled first.
        Returns the new run's handle (produced at once, like ``submit``). Raises AgentlogError if
        the run has no RunStarted, ``position`` is outside its history, a stored result is
        missing, or the history before ``position`` is too large for one submission, and
        (``UncleanSeam``) if ``position`` cuts between a call's Scheduled record and its outcome
        -- unless ``allow_in_doubt``: the new run then executes that call again, in doubt (its
        status names it), with its recorded key."""
        return self._seeded(position, new_id, allow_in_doubt=allow_in_doubt, fork_overrides=None)

    def fork(
        self,
        position: int,
        overrides: Mapping[str, Any] | None = None,
        new_id: str | None = None,
        *,
        whatif: WhatifChange | None = None,
        history: list[Event] | None = None,
    ) -> RunHandle:
        """A new run from this run's history before ``position`` that leaves this run untouched
        (unlike ``reset``) and runs effecting tools dry: each is recorded as skipped, never called,
        so comparing the two runs never touches the world. The workflow sees ``overrides`` (e.g.
        ``{"model": "planner-v2"}``) as ``ctx.overrides``. ``whatif``: the fork belongs to that
        what-if (runtime.whatif), marked as such and its model calls changed from ``position`` on;
        ``history``: this run's events as already read, payloads inlined (not read again).
        Raises what ``reset`` raises."""
        overrides = dict(overrides or {})
        return self._seeded(
            position, new_id, allow_in_doubt=False, fork_overrides=overrides, whatif=whatif, history=history
        )

    def _seeded(
        self,
        position: int,
        new_id: str | None,
        *,
        allow_in_doubt: bool,
        fork_overrides: dict[str, Any] | None,
        whatif: WhatifChange | None = None,
        history: list[Event] | None = None,
    ) -> RunHandle:
        submission, running = seeded_submission(
            self._reader,
            self.run_id,
            position,
            new_id or new_run_id(),
            allow_in_doubt=allow_in_doubt,
            fork_overrides=fork_overrides,
            history=history,
        )
        if whatif is not None:
            submission = dataclasses.replace(
                submission, whatif=whatif.whatif_id, whatif_change=whatif.to_json()
            )
        if fork_overrides is None and running:
            self.cancel(reason=f"reset to position {position}")
        self._endings.note_floor(submission.run_id)
        self._writer.send(submission)
        return RunHandle(submission.run_id, self._writer, self._reader, self._endings)

    # ------------------------------------------------------------------------------ reading
    def status(self) -> RunStatus:
        """The run's status, size, in-doubt calls, re-decisions and outcome, read from its events
        (from its first record when the run index locates it, else the whole partition is
        scanned). A run id the log does not hold has status "unknown".
        Raises KafkaException if the events topic cannot be read, DecodeError on a record this
        code cannot decode."""
        return self._reader.status(self.run_id)

    def history(self, *, payloads: bool = False) -> list[dict[str, Any]]:
        """As ``agentlog history --json``: each event's fields plus ``type``, ``partition`` and
        ``offset``. ``payloads``: results stored out of line are read back and shown inline, and
        each ``ModelCallScheduled`` also gets ``messages``, its whole prompt rebuilt from the run's
        message sequence (``prompts``), or ``prompt_error`` saying why it could not be.
        An unknown run has an empty history. Raises AgentlogError if a stored result or message is
        missing (with ``payloads``), and what ``events`` raises."""
        return self._reader.history(self.run_id, payloads=payloads)

    def events(self, start: int | None = None, end: int | None = None) -> Iterator[LoggedEvent]:
        """The run's events in log order with their offsets and sizes, fenced (zombie) records
        left out; ``start``: the offset to read the partition from (default its beginning),
        ``end``: where to stop (default the end now). A record this code cannot decode is left
        out with a warning (the worker parks the run, naming its offset). Raises KafkaException
        if the topic cannot be read."""
        return self._reader.events(self.run_id, start, end)

    def prompts(self) -> dict[int, RecordedInput]:
        """Every model call's input, by position, rebuilt from the run's message sequence with the
        messages stored out of line read back (runtime.log.records.prompts). Raises AgentlogError
        if a stored message is missing or altered, or the sequence lacks a message a prompt names."""
        return self._reader.prompts(self.run_id)

    def with_payloads(self, events: list[Event]) -> list[Event]:
        """``events`` (the run's) with their out-of-line results read back (checked) and carried
        inline. Raises AgentlogError if a stored result is missing or does not match its checksum."""
        return self._reader.with_payloads(self.run_id, events)

    def location(self) -> RunLocation | None:
        """Where the run index (runtime.log.records.run_index) says the run's records lie, or None
        if it does not locate the run. An entry with the ending's offset wins."""
        return self._reader.location(self.run_id)
