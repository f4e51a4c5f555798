"""Sealed submissions whose data key is written late, or never: what a producer that sends a
command before its key (or loses the key) puts in the commands topic.

The command is sealed under a fresh key kept in a scratch in-memory keys topic of the test's own;
the test appends that key (``key``) to the deployment's keys topic when it chooses, or not
at all.
"""

from __future__ import annotations

import time
from typing import Any

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.port.partitioning import partition_for
from runtime.log.records.events import RunSubmitted, SignalSent
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer
from runtime.workflow.canonical import canonical_json


class LateKeySubmission:
    """One run's ``RunSubmitted``, sealed, and the key that opens it, not written anywhere yet."""

    def __init__(self, settings: Settings, serde: Serde, run_id: str, workflow: str, input: Any) -> None:
        self.settings = settings
        self.run_id = run_id
        self.serde = serde
        keys = KeyStore(MemoryLog(settings), settings.keys_topic, settings.partitions)
        self.sealer = Sealer(keys)
        sealed = self.sealer.seal(
            RunSubmitted(
                run_id=run_id,
                workflow=workflow,
                input=canonical_json(input),
                occurred_at=int(time.time() * 1000),
                worker="late-key-producer",
            )
        )
        self.command = serde.encode(sealed)  # already sealed: a sealing serde leaves it as it is
        key = keys.held(run_id)
        assert key is not None
        self.key = key

    @property
    def partition(self) -> int:
        return partition_for(self.run_id, self.settings.partitions)

    def signal(self, name: str, payload: Any) -> bytes:
        """A ``SignalSent`` for the run, sealed under its late key. (A client's ``signal`` would make
        the run a key of its own while its key is not in the keys topic.)"""
        sent = SignalSent(
            run_id=self.run_id,
            name=name,
            payload=canonical_json(payload),
            occurred_at=int(time.time() * 1000),
            worker="late-key-producer",
        )
        return self.serde.encode(self.sealer.seal(sent))
