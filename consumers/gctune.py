"""The garbage collector's settings while a driver consumes records in bulk.

Every consumed record is a ``Message`` object, and those are tracked by the cyclic collector:
at CPython's default threshold (a generation-0 pass every 700 allocations) the collector runs
every few dozen records and walks the thousands of messages of the current poll each time, a
large share of the consuming thread's CPU (bench/sink.py measures it). The records form no
cycles (they are freed by reference counting the moment a poll is done), so the sink collects
rarely while it runs: a generation-0 threshold of 100,000, and the objects that exist when it
starts (modules, clients) frozen out of every pass. Both are restored when the last driver of
the process stops.

The collector is the whole interpreter's, so only a program's entry point opts in
(``run_sink``, hence ``agentlog sink``); a program that embeds the sink keeps its own settings.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

BULK_THRESHOLD = 100_000


class _Collector:
    """Process-wide: the settings to restore, and how many drivers run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved: tuple[int, int, int] | None = None

    def enter(self) -> None:
        with self.lock:
            if self.users == 0:
                self.saved = gc.get_threshold()
                gc.freeze()
                gc.set_threshold(BULK_THRESHOLD, self.saved[1], self.saved[2])
            self.users += 1

    def exit(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and self.saved is not None:
                gc.set_threshold(*self.saved)
                gc.unfreeze()
                self.saved = None


_COLLECTOR = _Collector()


@contextlib.contextmanager
def bulk_collection() -> Iterator[None]:
    """Collect rarely for the duration; nests (several sinks in one process) and restores once."""
    _COLLECTOR.enter()
    try:
        yield
    finally:
        _COLLECTOR.exit()
