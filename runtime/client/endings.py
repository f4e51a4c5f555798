"""Waiting for runs to end: their endings pushed by one tail over the partitions of the runs
this client follows (runtime.results), read back once for a run it did not submit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaException

from runtime.client.reading import RunReader
from runtime.errors import AgentlogError
from runtime.log.records.status import has_ended
from runtime.results import ResultTail
from runtime.run_status import LoggedEvent, summarize


class RunError(AgentlogError):
    """The run did not complete; ``status`` (a RunState, or "timeout") and ``reason`` say why."""

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        super().__init__(f"run {run_id} {status}: {reason}")
        self.run_id, self.status, self.reason = run_id, status, reason


class ForgedRecord(RunError):
    """The record read as the run's ending is not one a worker wrote (runtime.log.records.signing):
    ``forged`` says where it is and why; ``status`` and ``reason`` are the run's own, read without it."""

    def __init__(self, run_id: str, forged: str, status: str, reason: str) -> None:
        AgentlogError.__init__(
            self,
            f"run {run_id}: the ending read is forged, no worker wrote it: {forged}; "
            f"the run's own status is {status}{': ' + reason if reason else ''}",
        )
        self.run_id, self.status, self.reason, self.forged = run_id, status, reason, forged


class Endings:
    """The endings of runs, pushed: ``result``, ``wait`` and ``results`` answer from them.

    ``flush``: the client's, waited for before a wait (a run's submission must reach the log
    before its ending can be looked for)."""

    def __init__(self, reader: RunReader, flush: Callable[[], None]) -> None:
        self.reader = reader
        self._flush = flush
        # Results pushed: one tail over the events partitions of the runs this client submitted,
        # each from where the partition ended before the client's first submission to it.
        self._tail = ResultTail(
            reader.log, reader.serde, reader.settings.events_topic, verify_key=reader.verify_key
        )

    def note_floor(self, run_id: str) -> None:
        """Watch the run's events, on its partition from where it ended before the client's first
        submission to it: ``result`` need not read what came before."""
        partition = self.reader.partition(run_id)
        start = self._tail.started(partition)
        self._tail.watch(run_id, partition, self.reader.end_offset(partition) if start is None else start)

    def close(self) -> None:
        """Stop following results (a client used again follows again)."""
        self._tail.close()

    def result(self, run_id: str, timeout: float = 60.0, *, follow: bool = False) -> Any:
        """The run's result once it has ended: ``RunHandle.result`` says what is raised and when."""
        self._flush()
        deadline = time.monotonic() + timeout
        while True:
            future = self._ending(run_id)
            try:
                ending = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                self._tail.forget(run_id, future)
                raise self._timed_out(run_id, timeout) from None
            value, successor = self._conclude(run_id, ending, follow)
            if successor is None:
                return value
            run_id = successor

    async def wait(self, run_id: str, timeout: float = 60.0, *, follow: bool = False) -> Any:
        """``result`` for asyncio programs: the same answer, awaited without a thread per waiter."""
        await asyncio.to_thread(self._flush)
        deadline = time.monotonic() + timeout
        while True:
            future = await asyncio.to_thread(self._ending, run_id)
            try:
                ending = await asyncio.wait_for(
                    asyncio.wrap_future(future), max(0.0, deadline - time.monotonic())
                )
            except TimeoutError:
                self._tail.forget(run_id, future)
                raise await asyncio.to_thread(self._timed_out, run_id, timeout) from None
            value, successor = self._conclude(run_id, ending, follow)
            if successor is None:
                return value
            run_id = successor

    def results(self, run_ids: Iterable[str], timeout: float = 60.0) -> dict[str, Any]:
        """Wait for many runs at once; their results by run id, in the order given. ``timeout``
        covers them all. Raises RunError for the first run, in that order, that did not complete."""
        self._flush()
        deadline = time.monotonic() + timeout
        futures = {run_id: self._ending(run_id) for run_id in run_ids}
        concurrent.futures.wait(list(futures.values()), timeout=max(0.0, deadline - time.monotonic()))
        answers: dict[str, Any] = {}
        for run_id, future in futures.items():
            if not future.done():
                for other, waiting in futures.items():
                    self._tail.forget(other, waiting)
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
        partition = self.reader.partition(run_id)
        start = self._tail.started(partition)
        if start is None or not self._tail.is_watched(run_id):
            self._tail.watch(run_id, partition, self.reader.end_offset(partition) if start is None else start)
            end = self.reader.end_offset(partition)
            location = self.reader.location(run_id)
            ending = self.reader.ending_at(run_id, location, end) or _first_ending(
                run_id, self.reader.logged(run_id, location, end)
            )
            if ending is not None:
                done: concurrent.futures.Future[LoggedEvent] = concurrent.futures.Future()
                done.set_result(ending)
                return done
        return self._tail.ending(run_id)

    def _conclude(self, run_id: str, ending: LoggedEvent, follow: bool) -> tuple[Any, str | None]:
        """(the result, None) of a completed run, (None, successor) of one that continued as new
        and is followed; RunError otherwise."""
        if ending.unchecked and self.reader.verify_key is not None:  # the tail saw only its end
            ending = self._checked(run_id, ending)
        if ending.forged is not None:
            own = summarize(run_id, self.reader.logged(run_id, self.reader.location(run_id)))
            raise ForgedRecord(run_id, ending.forged, own.status, own.reason or "")
        summary = summarize(run_id, [ending])
        if summary.status == "completed":
            return summary.result, None
        if follow and summary.continued_as is not None:
            return None, summary.continued_as
        raise RunError(run_id, summary.status, summary.reason or "")

    def _checked(self, run_id: str, ending: LoggedEvent) -> LoggedEvent:
        """``ending`` as the run's records read from its start judge it (a tail that began after
        the run's start cannot)."""
        logged = self.reader.logged(run_id, self.reader.location(run_id), ending.offset + 1)
        return next((e for e in logged if e.offset == ending.offset), ending)

    def _timed_out(self, run_id: str, timeout: float) -> RunError:
        """The timeout, with the run's status and whether any worker holds its partition."""
        partition = self.reader.partition(run_id)
        status = summarize(
            run_id, list(self.reader.events(run_id, start=self._tail.started(partition)))
        ).status
        try:
            owner = self.reader.log.commands_owner(partition)
        except KafkaException as error:
            held = f"whether a worker holds partition {partition} is unknown ({error})"
        else:
            held = (
                f"no worker of group {self.reader.settings.worker_group!r} holds its partition {partition}"
                if owner is None
                else f"its partition {partition} is assigned to worker {owner!r}"
            )
        return RunError(run_id, "timeout", f"not finished after {timeout}s (status {status}); {held}")


def _first_ending(run_id: str, logged: list[LoggedEvent]) -> LoggedEvent | None:
    """The run's first ending a worker wrote; else the first forged one (named by ``_conclude``)."""
    endings = [
        e for e in logged if has_ended(summarize(run_id, [dataclasses.replace(e, forged=None)]).status)
    ]
    return next((e for e in endings if e.forged is None), endings[0] if endings else None)
