"""Where a streaming model call's deltas go as they form.

The worker sets a sink around a live model attempt (``deltas_to``); a model adapter that streams
calls ``emit`` for each chunk. With no sink set -- a replay, a local run, a unit test -- ``emit``
does nothing and ``streaming()`` is false, so an adapter may skip streaming altogether. Deltas are
a view for the run's watchers: the recorded final response stays the truth, whatever was emitted.

A context variable does not follow a call into the worker's thread pool by itself: whoever runs a
sync adapter there binds the sink inside the thread (``deltas_to`` again, from the pool thread).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Delta", "DeltaKind", "DeltaSink", "current_sink", "deltas_to", "emit", "streaming"]

# "text": the answer's text; "tool_args": a tool call's arguments as they form (JSON text, in
# pieces); "thinking": reasoning text a provider streams apart from the answer.
DeltaKind = Literal["text", "tool_args", "thinking"]


@dataclass(frozen=True, slots=True)
class Delta:
    kind: DeltaKind
    text: str
    index: int = 0  # which part of the response: a tool call's index among the response's calls
    name: str | None = None  # a tool call's name, on the first delta that knows it


DeltaSink = Callable[[Delta], None]

_sink: contextvars.ContextVar[DeltaSink | None] = contextvars.ContextVar("agentlog_delta_sink", default=None)


def deltas_to(sink: DeltaSink) -> DeltasTo:
    """Send the deltas emitted in this context (this task, or this thread) to ``sink``."""
    return DeltasTo(sink)


class DeltasTo:
    """``deltas_to``'s context manager: a class, not a generator's, as it is set around every
    live model call (twice for a sync one), where a generator's frame and helper cost more than
    the variable's set and reset."""

    __slots__ = ("_sink", "_token")

    def __init__(self, sink: DeltaSink) -> None:
        self._sink = sink

    def __enter__(self) -> None:
        self._token = _sink.set(self._sink)

    def __exit__(self, *exc: object) -> None:
        _sink.reset(self._token)


def current_sink() -> DeltaSink | None:
    """The sink of this context, to bind again in a pool thread (None: nobody reads deltas)."""
    return _sink.get()


def emit(delta: Delta) -> None:
    sink = _sink.get()
    if sink is not None:
        sink(delta)


def streaming() -> bool:
    """Whether anyone reads this call's deltas: an adapter streams only then."""
    return _sink.get() is not None
