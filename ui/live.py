"""A running run's stream as server-sent events (``GET /run/ID/stream``), for the live run page.

The page shows what the store holds, refreshed every 2 s (ui.js); beside it, this endpoint reads
the run's partition of the stream topic (runtime.log.records.stream) from ``LOOKBACK_MS`` back --
the step in progress, tokens included -- and sends each event as it arrives, until the run ends.
What it reads passes through the same seam as ``Client.stream`` (runtime.stream_seam): the backlog
compacted (an attempt a crash replaced is left out), a repeat dropped, a superseded attempt marked.
The one read of Kafka besides the keys topic's (pyproject's ui-only-reads contract names it); it
never writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator

from runtime.config import Settings
from runtime.log.kafka.stream import StreamFollower, StreamGap
from runtime.log.records.stream import StreamEvent, StreamFormatError, decode
from runtime.stream_seam import Seam, compact

LOOKBACK_MS = 120_000  # the live panel starts with what the run did in the last two minutes
KEEPALIVE_S = 10.0  # a comment line this often keeps proxies from closing a quiet stream
MAX_OPEN_S = 3600.0  # a page left open this long reconnects (EventSource does it by itself)


def sse(event: StreamEvent) -> bytes:
    return f"data: {json.dumps(event.to_json())}\n\n".encode()


def run_stream(
    settings: Settings, partition: int, run_id: str, stopped: Callable[[], bool] = lambda: False
) -> Generator[bytes, None, None]:
    """The SSE body for ``run_id`` (in ``partition`` of the stream topic), until the run ends,
    ``stopped()`` or ``MAX_OPEN_S``; comment lines between events keep the connection alive."""
    follower = StreamFollower(settings, settings.stream_topic, partition)
    try:
        high = follower.bounds()[1]
        start = min(high, follower.offset_at(int(time.time() * 1000) - LOOKBACK_MS))
        follower.start(start)
        key = run_id.encode()
        seam = Seam([])
        backlog: list[StreamEvent] | None = [] if start < high else None
        yield b": live\n\n"
        opened = last = time.monotonic()
        while not stopped() and time.monotonic() - opened < MAX_OPEN_S:
            try:
                records = follower.poll(0.2)
            except StreamGap as gap:
                yield sse(StreamEvent(run_id, "gap", data={"reason": str(gap)}))
                continue
            shown: list[StreamEvent] = []
            for record in records:
                if record.key != key or record.value is None:
                    continue
                try:
                    shown.extend(seam.admit(decode(record.value)))
                except StreamFormatError:
                    continue
            if backlog is not None:
                backlog.extend(shown)
                shown = []
                if follower.position is not None and follower.position >= high:
                    shown, backlog = compact(backlog), None
            for event in shown:
                yield sse(event)
            if shown:
                last = time.monotonic()
            elif time.monotonic() - last >= KEEPALIVE_S:
                last = time.monotonic()
                yield b": keep-alive\n\n"
            if seam.ended and backlog is None:
                return
    finally:
        follower.close()
