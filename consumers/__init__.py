"""Stream processors that read the events log; today the ClickHouse sink.

``run_sink`` is what ``agentlog sink`` runs. ``SinkCore`` is the driver-independent core
(batching, atomic deduplicated writes, resume from the store, backpressure) that the
confluent-kafka driver (``run_direct``) and the faust-streaming driver (``run_faust``, imported
from ``consumers.faust_app`` because faust is heavy) both feed.
"""

from __future__ import annotations

from .core import BackpressureError, SinkConfig, SinkCore, SinkError, SinkStats, SinkWriteError
from .direct import run_direct
from .registry import WriterSchemas
from .runner import DRIVERS, run_sink
from .store_writer import SinkState, StoreWriter

__all__ = [
    "DRIVERS",
    "BackpressureError",
    "SinkConfig",
    "SinkCore",
    "SinkError",
    "SinkState",
    "SinkStats",
    "SinkWriteError",
    "StoreWriter",
    "WriterSchemas",
    "run_direct",
    "run_sink",
]
