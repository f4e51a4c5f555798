"""Results pushed, not polled: one tail per client resolves every waiter at its run's end.

A ``Client`` that waits for results keeps one reader (``EventLog.tail``) over the events
partitions of the runs it submitted, from where each partition ended before the client's first
submission to it. A thread decodes what the tail delivers -- keyless records (claims), and the starts and ends of
watched runs; of a watched run's other records it reads only the type and the fencing epoch from
the bytes (``Serde.peek``), and other runs' records are skipped -- and at a watched run's ending
event resolves the run's waiters: thousands of waiters, one reader, and a waiter answered within
a poll of the ending event's ack.

Fencing is the client's usual rule (``runtime.log.records.fencing``): one ``FenceFilter`` per partition,
fed in offset order with the claims and the watched runs' events, from the partition's start
offset. Sharing one filter among the watched runs changes nothing a per-run filter would
decide: an owner's events carry its claim's offset, which is at least every earlier owner's,
so the watermark the other runs' events raise it to is one the claims raise it to as well.

The ending events read are kept (the last ``keep``), so a run that ended before anyone waited for
it answers at once. So are the keys of the runs watched (the last ``keep`` submitted): a client
that only submits does not grow without bound, and a run whose key was dropped is answered the
way a run another client submitted is (``RunHandle.result`` reads its partition first).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from runtime import stagemarks
from runtime.log.port.protocol import EventLog, LogRecord, Tail
from runtime.log.records.events import Event, RunRejected, RunStarted
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import claim_check
from runtime.log.records.signing import Vouching
from runtime.log.records.status import ENDING_EVENTS
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.run_status import LoggedEvent

logger = logging.getLogger("agentlog.results")

_ENDING = frozenset(ENDING_EVENTS)
# The records of a watched run decoded whole: its ends, and where it starts (which begins its
# chain of vouching). Of the others only the type and the epoch are read (``ResultTail._pass``).
_DECODED = _ENDING | {RunStarted.__name__, RunRejected.__name__}


class ResultTail:
    """Follows the events partitions of watched runs; ``ending`` futures resolve at their end."""

    def __init__(
        self,
        log: EventLog,
        serde: Serde,
        topic: str,
        *,
        keep: int = 100_000,
        verify_key: Ed25519PublicKey | None = None,
    ) -> None:
        self._log = log
        self._serde = serde
        self._topic = topic
        self._keep = keep
        self._lock = threading.Lock()
        self._starts: dict[int, int] = {}  # partition -> the offset it is (to be) followed from
        self._fences: dict[int, FenceFilter] = {}
        self._watched: dict[bytes, None] = {}  # keys of runs whose records are decoded, oldest first
        self._ended: OrderedDict[str, LoggedEvent] = OrderedDict()  # run id -> its ending event
        self._waiters: dict[str, list[Future[LoggedEvent]]] = {}
        self._tail: Tail | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._failure: BaseException | None = None
        # With the workers' verify key, each watched run's records are followed (runtime.log.records.signing):
        # an ending no worker signed resolves its waiters as forged and is not kept as the run's end.
        self._verify_key = verify_key
        self._vouching: dict[str, Vouching] = {}

    def watch(self, run_id: str, partition: int, start: int) -> int:
        """Decode ``run_id``'s records from now on; its partition is followed from ``start``
        unless it already is (or will be) from another offset. The offset it is followed from."""
        with self._lock:
            self._watched[run_id.encode()] = None
            if len(self._watched) > self._keep:
                del self._watched[next(iter(self._watched))]
            followed = self._starts.setdefault(partition, start)
            if self._tail is not None and partition not in self._fences:
                self._follow(partition, followed)
            return followed

    def is_watched(self, run_id: str) -> bool:
        """Whether the run's records are decoded (or its end was read already)."""
        return run_id.encode() in self._watched or run_id in self._ended

    def started(self, partition: int) -> int | None:
        """The offset ``partition`` is followed from, if it is."""
        return self._starts.get(partition)

    def ending(self, run_id: str) -> Future[LoggedEvent]:
        """A future of the run's ending event (at once if it was read already); the run must be
        watched. Starts the tail at the first call."""
        future: Future[LoggedEvent] = Future()
        with self._lock:
            if self._failure is not None:
                future.set_exception(self._failure)
                return future
            ended = self._ended.get(run_id)
            if ended is not None:
                future.set_result(ended)
                return future
            self._waiters.setdefault(run_id, []).append(future)
            if self._tail is None:
                self._start()
        return future

    def forget(self, run_id: str, future: Future[LoggedEvent]) -> None:
        """Drop a waiter that gave up (timed out)."""
        with self._lock:
            waiters = self._waiters.get(run_id)
            if waiters is not None and future in waiters:
                waiters.remove(future)
                if not waiters:
                    del self._waiters[run_id]

    def close(self) -> None:
        """Stop the tail (a later ``ending`` starts it again, from the same offsets)."""
        with self._lock:
            thread, self._thread, self._running = self._thread, None, False
        if thread is not None:
            thread.join(timeout=10)
        with self._lock:
            tail, self._tail = self._tail, None
            self._fences.clear()
        if tail is not None:
            tail.close()

    # -- the tail thread ---------------------------------------------------------------------------
    def _start(self) -> None:
        self._tail = self._log.tail(self._topic)
        for partition, start in self._starts.items():
            self._follow(partition, start)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="agentlog-results", daemon=True)
        self._thread.start()

    def _follow(self, partition: int, start: int) -> None:
        assert self._tail is not None
        self._fences[partition] = FenceFilter(claims=claim_check(self._verify_key, partition))
        self._tail.follow(partition, start)

    def _run(self) -> None:
        tail = self._tail
        assert tail is not None
        try:
            while self._running:
                records = tail.poll(0.1)
                if records:
                    self._take(records)
        except Exception as error:  # handed to every waiter, now and later: none waits forever
            logger.exception("results tail stopped")
            with self._lock:
                self._failure = error
                waiters, self._waiters = self._waiters, {}
            for futures in waiters.values():
                for future in futures:
                    future.set_exception(error)

    def _take(self, records: list[tuple[int, LogRecord]]) -> None:
        for partition, record in records:
            key = record.key
            if record.value is None or (key is not None and key not in self._watched):
                continue
            if key is not None:
                peeked = self._serde.peek(record.value)
                if peeked is not None and peeked[0] not in _DECODED:
                    self._pass(partition, key, record.value, *peeked)
                    continue
            try:
                event = self._serde.decode(record.value, key)
            except DecodeError as error:
                # The worker parks a run with such a record, naming its offset: that ends it.
                logger.warning("%s[%s] offset %s left out: %s", self._topic, partition, record.offset, error)
                continue
            assert isinstance(event, Event)
            fence = self._fences.get(partition)
            if fence is None or not fence.admit(event, record.offset) or key is None:
                continue
            forged: str | None = None
            unchecked = False
            if self._verify_key is not None:
                vouching = self._vouching.get(event.run_id)
                if vouching is None:
                    vouching = self._vouching[event.run_id] = Vouching(self._verify_key, event.run_id)
                why = vouching.admit(
                    record.value, event.type, first=isinstance(event, (RunStarted, RunRejected))
                )
                if why is not None:
                    forged = f"{self._topic}[{partition}]@{record.offset} ({event.type}): {why}"
                unchecked = not vouching.complete
            if event.type in _ENDING:
                self._ended_at(LoggedEvent(record.offset, len(record.value), event, forged, unchecked))

    def _pass(self, partition: int, key: bytes, value: bytes, record_type: str, epoch: int) -> None:
        """A watched run's record that neither ends nor starts it: its epoch keeps the fence, its
        bytes the run's chain of vouching; nothing else of it is needed, so it is not decoded."""
        fence = self._fences.get(partition)
        if fence is None or not fence.admit_epoch(epoch) or self._verify_key is None:
            return
        run_id = key.decode("utf-8", "replace")
        vouching = self._vouching.get(run_id)
        if vouching is None:
            vouching = self._vouching[run_id] = Vouching(self._verify_key, run_id)
        vouching.admit(value, record_type)

    def _ended_at(self, logged: LoggedEvent) -> None:
        run_id = logged.event.run_id
        with self._lock:
            if run_id in self._ended:
                return  # its first admitted ending event is the run's end
            if logged.forged is not None:  # named to who waits now; the run's own end is still awaited
                logger.warning("run %s: forged ending %s", run_id, logged.forged)
                forged_to = self._waiters.pop(run_id, [])
                for future in forged_to:
                    future.set_result(logged)
                return
            self._vouching.pop(run_id, None)
            self._watched.pop(run_id.encode(), None)
            self._ended[run_id] = logged
            while len(self._ended) > self._keep:
                self._ended.popitem(last=False)
            waiters = self._waiters.pop(run_id, [])
        if stagemarks.ON:
            stagemarks.mark("tail delivered", run_id)
        for future in waiters:
            future.set_result(logged)
