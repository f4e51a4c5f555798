"""A value a scrape reads that costs a request to get (end offsets of a topic): sampled in a thread
of its own every few seconds, so a scrape reads the last sample and never waits on Kafka (a
ListOffsets request may wait out a leader election)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("agentlog.ops")

INTERVAL_S = 5.0


class Sampler:
    """``sample()`` every ``interval`` s; ``value`` is the last answer (``{}`` until the first)."""

    def __init__(self, name: str, sample: Callable[[], dict[int, int]], interval: float = INTERVAL_S) -> None:
        self.name = name
        self.sample = sample
        self.interval = interval
        self.value: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"agentlog-{name}", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.value = self.sample()
                failing = False
            except Exception as error:  # the last sample stays; said once per outage, not per try
                if not failing:
                    log.warning(json.dumps({"event": f"{self.name}_unavailable", "why": str(error)}))
                failing = True
            self._stop.wait(self.interval)
