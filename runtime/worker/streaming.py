"""What the worker publishes of the runs it executes, for their watchers (``Client.stream``) and
queries (``Client.query``): views beside the log, never read back by a worker.

To the stream topic (runtime.log.records.stream), in the run's partition, keyed by run id:
- each record an activation appends that stands for a step (``from_record``): a call scheduled,
  its outcome, a timer or permit wait (a signal wait with a timeout), a signal, the run's end --
  published as the record is handed to the batcher, so a watcher sees a step about when its
  record is written;
- a signal wait without a timeout, which has no record, as the run parks on it: the activation
  that began it live says so (``Completion.signal_waits``; a replay begins none);
- each attempt of a call as it starts (``attempt``), and before it, when the call had an earlier
  attempt -- a retry, or a re-run after a crash (the call is in doubt) -- a ``superseded`` marker
  for it: whatever a watcher showed of the earlier attempt's deltas is void;
- a model attempt's deltas through the sink ``deltas_to`` sets around it (runtime.models.deltas);
  a sync adapter runs in a pool thread, where the sink is bound again (``in_thread``).

Only live execution publishes: a replay (a takeover's rebuild, a run cache's wake) appends no
records and starts no attempts, so it publishes nothing new. With ``seal_contents`` no contents go
out in the clear: no deltas (no sink is set, so adapters do not stream) and no results or errors;
each attempt, outcome and ending says so (``data.sealed``: runtime.log.records.stream).

To the compacted exposed topic, keyed by run id: the run's exposed state (``ctx.expose``), whole,
each time the code changes it live (runtime.workflow.exposed).

Publishing never waits: the producer's ``publish`` queues the record (StreamProducer drops one it
cannot queue), and nothing of a run's course depends on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from runtime.config import Settings
from runtime.log.records.events import Event
from runtime.log.records.stream import StreamEvent, encode, encode_parts, parts_of
from runtime.models.deltas import Delta, DeltaSink, deltas_to
from runtime.worker.stream_outbox import StreamOut, StreamRecord, TurnOutbox
from runtime.workflow.activation import RunView
from runtime.workflow.intents import Intent

__all__ = ["RunStreams", "StreamOut", "in_thread"]


def _now_ms() -> int:
    return int(time.time() * 1000)


class RunStreams:
    """Publishes what the worker's runs do to the stream and exposed topics."""

    def __init__(self, settings: Settings, out: StreamOut) -> None:
        self.out = TurnOutbox(out)  # one producer call per topic and loop turn
        self.topic = settings.stream_topic
        self.exposed_topic = settings.exposed_topic
        self.contents = not settings.seal_contents

    def _send(self, partition: int, event: StreamEvent) -> None:
        self.out.publish(self.topic, partition, event.run_id.encode(), encode(event))

    def appended(self, partition: int, epoch: int, view: RunView, events: Sequence[Event]) -> None:
        """An activation's records, handed to the batcher, and the state its code exposed."""
        topic, contents = self.topic, self.contents
        records: list[StreamRecord] = []
        for record in events:
            made = parts_of(record, contents)  # built as bytes at once: no StreamEvent on this path
            if made is not None:
                run, kind, position, attempt, data, at = made
                value = encode_parts(run, kind, position, attempt, data, at, epoch)
                records.append((topic, partition, run.encode(), value))
        if records:
            self.out.publish_all(records)
        state = view.exposed.take() if view.exposed is not None else None
        if state is not None:
            value = orjson.dumps({"run_id": view.run_id, "state": state, "at": _now_ms()})
            self.out.publish(self.exposed_topic, partition, view.run_id.encode(), value)

    def signal_waits(self, partition: int, epoch: int, run_id: str, waits: Sequence[tuple[int, str]]) -> None:
        """The run waits for signals with no timeout, begun live: the ``waiting`` event a
        ``TimerScheduled`` would have made, with no ``until``."""
        at = _now_ms()
        for position, name in waits:
            data = {"for": "signal", "name": name, "until": None}
            self._send(partition, StreamEvent(run_id, "waiting", position, 0, data, at, epoch))

    def attempt(
        self, partition: int, epoch: int, run_id: str, intent: Intent, attempt: int, worker: str
    ) -> None:
        """An attempt of a call starts. An attempt after the first had one before it: a failed one,
        or one in flight on a worker that died (a call re-run in doubt counts it: runtime.worker.calls)."""
        at = _now_ms()
        key, position = run_id.encode(), intent.position
        if attempt > 1:
            data = {"by": attempt, "reason": "retried" if not intent.in_doubt else "re-run after a crash"}
            superseded = encode_parts(run_id, "superseded", position, max(1, attempt - 1), data, at, epoch)
            self.out.publish(self.topic, partition, key, superseded)
        started: dict[str, Any] = {"call": intent.kind, "name": intent.name, "worker": worker}
        if not self.contents:  # its answer is not streamed: the watcher is told so
            started["sealed"] = True
        value = encode_parts(run_id, "attempt", position, attempt, started, at, epoch)
        self.out.publish(self.topic, partition, key, value)

    def sink(self, partition: int, epoch: int, run_id: str, position: int, attempt: int) -> DeltaSink | None:
        """Where one model attempt's deltas go; None when contents are not published in the clear."""
        if not self.contents:
            return None
        key = run_id.encode()
        publish, topic = self.out.publish, self.topic

        def sink(delta: Delta) -> None:
            data: dict[str, Any] = {"kind": delta.kind, "text": delta.text, "index": delta.index}
            if delta.name is not None:
                data["name"] = delta.name
            event = StreamEvent(run_id, "delta", position, attempt, data, _now_ms(), epoch)
            publish(topic, partition, key, encode(event))

        return sink

    def flush(self, timeout: float = 5.0) -> None:
        """What watchers have not been sent yet, within ``timeout`` (a worker stopping)."""
        self.out.flush(timeout)


def in_thread(fn: Callable[..., Any], sink: DeltaSink) -> Callable[..., Any]:
    """A sync model function that sends its deltas to ``sink`` from the pool thread it runs in (a
    context variable does not follow a call into the pool by itself)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with deltas_to(sink):
            return fn(*args, **kwargs)

    return run
