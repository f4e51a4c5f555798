"""Partition records no worker signed, as a worker meets them: not obeyed, and named.

With the workers' key (``AGENTLOG_SIGNING_KEY``, or only the public ``AGENTLOG_VERIFY_KEY``) a
worker checks the claims and checkpoint records it reads (runtime.log.records.partition_signing):

- its ownership tail (:meth:`PartitionForgeries.is_claim`): a keyless record after its claim that
  is an ``EpochClaimed`` no worker signed for this partition -- or a copy of its own claim -- is
  not a newer claim: the worker keeps the partition and its effects go on;
- its rebuild (runtime.worker.rebuild): a forged claim fences nothing, a forged checkpoint or
  snapshot is not trusted (the history is read instead); each is handed to :meth:`name`.

Each forgery is one log line (``forged_partition_record``) and one count of
``agentlog_forged_partition_records`` by record type.
"""

from __future__ import annotations

import json
import logging
import threading

from runtime.config import Settings
from runtime.log.records.events import EpochClaimed
from runtime.log.records.partition_signing import ClaimCheck, partition_verify_key
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.worker.metrics import WorkerMetrics

log = logging.getLogger("agentlog.worker")

_NAMED_AT_MOST = 10_000  # forged claims remembered as named (a tail may read one twice)


class PartitionForgeries:
    """Checks the claims the ownership tail meets; names every forged partition record."""

    def __init__(self, settings: Settings, serde: Serde, metrics: WorkerMetrics) -> None:
        self.serde = serde
        self.metrics = metrics
        self.topic = settings.events_topic
        self.key = partition_verify_key(settings.signing_key.get_secret_value(), settings.verify_key)
        # Partition -> the signature of this worker's own claim there (set by the takeover's claim).
        self.own: dict[int, bytes] = {}
        self._named: set[bytes] = set()
        self._lock = threading.Lock()  # the tail's thread and the loop both name

    def is_claim(self, partition: int, value: bytes) -> bool:
        """On the ownership tail's thread: True if ``value`` is a claim a worker wrote for ``partition``."""
        try:
            claim = self.serde.decode(value)
        except DecodeError:
            return False
        if not isinstance(claim, EpochClaimed):
            return False
        if self.key is None:
            return True
        why = ClaimCheck(self.key, partition, self.own.get(partition, b"")).forged(claim)
        if why is None:
            return True
        with self._lock:
            first = value not in self._named
            if first and len(self._named) < _NAMED_AT_MOST:
                self._named.add(value)
        if first:
            self.name(f"{self.topic}[{partition}] (EpochClaimed, by {claim.worker!r}): {why}", "EpochClaimed")
        return False

    def name(self, record: str, kind: str, action: str = "ignored") -> None:
        """One log line and one count for a forged partition record."""
        with self._lock:
            self.metrics.forged_partition_records[kind] = (
                self.metrics.forged_partition_records.get(kind, 0) + 1
            )
        log.error(json.dumps({"event": "forged_partition_record", "record": record, "action": action}))
