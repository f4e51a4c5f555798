"""Where a run's recorded history meets its live stream, for a reader that joins late: no gap, no
duplicate, and no attempt shown that another replaced. Pure: tested without a broker.

A reader (runtime.client.streaming) reads the run's events to their end and shows them as stream
events (``from_record``); then it reads the stream topic from a point before the first step the
history leaves unfinished, so nothing between the two reads is missed, and passes each stream event
through ``Seam.admit``:

- an event a record stands for (a step started, an outcome, a wait, a signal, the end) is shown
  once: dropped if the history (or the stream before it) held its identity;
- an attempt's events (``attempt``, ``delta``) of a call whose outcome the history holds are
  dropped: the recorded result says it all;
- an ``attempt`` of a call whose earlier attempt is still open, with no ``superseded`` marker
  between (a worker that died before the call's Scheduled record was durable runs it again as
  a first attempt, and cannot know), gets a marker made here; a delta of an attempt that is no
  longer the open one (a fenced worker's) is dropped;
- a ``completed`` read only from the stream (its record may never have become durable, when its
  worker died) is undone by a later attempt of the same call.

What the stream held before the reader caught up (its backlog) is shown compacted (``compact``):
an attempt superseded within it is left out, with its marker, so a reader joining after a crash
sees only the attempt that counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime.log.records.stream import RECORDED, StreamEvent, identity

# The kinds a superseded attempt leaves out of a backlog: its start, its deltas, and an outcome only
# the stream held. A failure stays: its record is why the next attempt was made.
_VOID_WHEN_SUPERSEDED = frozenset({"attempt", "delta", "completed"})


def _settles(event: StreamEvent) -> bool:
    return event.kind == "completed" or (event.kind == "failed" and bool(event.data.get("final")))


class Seam:
    """What a reader shows of each stream event, given the history it showed first."""

    def __init__(self, history: Sequence[StreamEvent]) -> None:
        self._covered = {identity(e) for e in history if e.kind in RECORDED}
        self._history_settled = {e.position for e in history if _settles(e)}
        self._live_settled: dict[int, int] = {}  # position -> epoch of the worker that said so
        self._open: dict[int, tuple[int, int]] = {}  # position -> (attempt, epoch) being shown
        self.ended = any(e.kind == "ended" for e in history)

    def admit(self, event: StreamEvent) -> list[StreamEvent]:
        """The events to show for ``event`` read from the stream: none, it, or a marker and it."""
        position = event.position
        if event.kind in RECORDED:
            ident = identity(event)
            if ident in self._covered or (event.kind != "ended" and self.ended):
                return []
            self._covered.add(ident)
            if _settles(event):
                if event.live:
                    self._live_settled[position] = event.epoch
                else:  # read from the log (a reader's second look): as sure as the history
                    self._history_settled.add(position)
                self._open.pop(position, None)
            if event.kind == "ended":
                self.ended = True
            return [event]
        if position in self._history_settled or self.ended:
            return []
        settled_by = self._live_settled.get(position)
        if event.kind == "superseded":
            if settled_by is not None:  # an outcome the stream told of, not durable: undone
                self._unsettle(position)
            self._open.pop(position, None)
            return [event]
        if event.kind == "attempt":
            shown: list[StreamEvent] = []
            opened = self._open.get(position)
            if settled_by is not None:
                if event.epoch <= settled_by:
                    return []  # a late copy from before the outcome
                self._unsettle(position)
                shown.append(_superseded(event, event.attempt))
            elif opened is not None and opened != (event.attempt, event.epoch):
                shown.append(_superseded(event, opened[0]))
            self._open[position] = (event.attempt, event.epoch)
            return [*shown, event]
        # a delta: shown only for the attempt watchers see now (a delta before any attempt event:
        # the reader joined mid-attempt, so it opens it)
        if settled_by is not None:
            return []
        opened = self._open.setdefault(position, (event.attempt, event.epoch))
        return [event] if opened == (event.attempt, event.epoch) else []

    def _unsettle(self, position: int) -> None:
        self._live_settled.pop(position, None)
        self._covered = {
            i for i in self._covered if not (i[0] in ("completed", "failed") and i[1] == position)
        }


def unfinished(history: Sequence[StreamEvent]) -> list[StreamEvent]:
    """The history's events of the steps in progress -- calls scheduled with no final outcome, and
    the wait the run is in if that is its last step: what a reader joining "from the current step"
    is shown first."""
    done = {e.position for e in history if _settles(e)}
    shown = [e for e in history if e.kind == "started" and e.position not in done]
    steps = [e for e in history if e.kind != "ended"]
    if steps and steps[-1].kind == "waiting":
        shown.append(steps[-1])
    return sorted(shown, key=lambda e: e.position)


def _superseded(event: StreamEvent, earlier: int) -> StreamEvent:
    return StreamEvent(
        event.run_id,
        "superseded",
        event.position,
        earlier,
        {"by": event.attempt, "reason": "another attempt started"},
        event.at,
        event.epoch,
    )


def compact(backlog: Sequence[StreamEvent]) -> list[StreamEvent]:
    """A backlog as a reader who joins late is shown it: each attempt superseded within it left out
    (its start, deltas and unrecorded outcome), and its marker with it."""
    shown: list[StreamEvent] = []
    for event in backlog:
        if event.kind == "superseded":
            shown = [
                e for e in shown if not (e.position == event.position and e.kind in _VOID_WHEN_SUPERSEDED)
            ]
            continue
        shown.append(event)
    return shown


def resume_from_ms(history: Sequence[StreamEvent], last_at: int) -> int:
    """Where a reader of the stream starts (ms since the epoch): the start of the earliest step the
    history leaves unfinished, else ``last_at``, when the history's last record was written --
    what the stream holds from there on is either in the history (and dropped by identity) or new."""
    done = {e.position for e in history if _settles(e)}
    open_starts = [e.at for e in history if e.kind == "started" and e.position not in done]
    return min([*open_starts, last_at])
