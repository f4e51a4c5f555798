"""The owner's recognition of its own records (runtime.worker.foreign.ForeignRecords.check)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from runtime.log.records.chain import START, ChainKey, seal
from runtime.worker.foreign import ForeignRecords

pytestmark = pytest.mark.unit

KEY = ChainKey(b"workers")


def _foreign() -> ForeignRecords:
    batcher = SimpleNamespace(written=None)
    executor: Any = SimpleNamespace(settings=SimpleNamespace(events_topic="events"), batcher=batcher)
    foreign = ForeignRecords(executor, lambda partition: None)
    assert batcher.written is foreign.written  # the batcher notes each link it seals there
    return foreign


def test_a_record_the_worker_sealed_is_its_own_once_and_any_other_is_foreign() -> None:
    foreign = _foreign()
    mine = seal(KEY, b"run-1", START, b"\x00\x00\x00\x00\x01\x02\x00")
    forged = seal(ChainKey(b"a guess"), b"run-1", START, b"\x00\x00\x00\x00\x01\x02\x00")
    foreign.written.setdefault(3, set()).add(mine[-8:])
    assert foreign.check(3, forged)  # a link this worker did not seal
    assert foreign.check(3, b"\x00\x00\x00\x00\x01\x02\x00")  # no link at all
    assert foreign.check(4, mine)  # sealed for another partition
    assert not foreign.check(3, mine)
    assert foreign.check(3, mine)  # met once: a second copy of it is not the worker's
    foreign.written.setdefault(3, set()).add(mine[-8:])
    foreign.forget(3)
    assert foreign.check(3, mine)
