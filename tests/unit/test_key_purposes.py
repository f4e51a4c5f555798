"""The key store's one way to get a key per purpose, and a client's sealing-key work
(runtime.log.sealing.submitter), on the in-memory log: which reads and writes each one makes."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer
from runtime.log.sealing.submitter import SubmitterKeys

pytestmark = pytest.mark.unit

SETTINGS = Settings(partitions=1, seal_contents=True)


class CountingLog(MemoryLog):
    """The in-memory log, counting the keys topic's lookups (each asks for the partition's end)
    and the keys it writes."""

    reads = 0
    writes = 0

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        if topic == SETTINGS.keys_topic:
            self.reads += 1
        return super().watermarks(topic, partition)

    def append(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None
    ) -> Future[int]:
        if topic == SETTINGS.keys_topic:
            self.writes += 1
        return super().append(topic, partition, key, value)


def _store(log: MemoryLog) -> KeyStore:
    return KeyStore(log, SETTINGS.keys_topic, SETTINGS.partitions)


def test_a_new_runs_key_is_written_without_a_read() -> None:
    log = CountingLog(SETTINGS)
    key = _store(log).new_key("drawn-id")
    assert (log.reads, log.writes) == (0, 1)
    assert _store(log).opening_key("drawn-id") == key


def test_a_sealing_key_is_the_one_written_else_a_new_one() -> None:
    log = CountingLog(SETTINGS)
    written = _store(log).sealing_key("subject/customer-1")
    assert log.writes == 1
    again = _store(log).sealing_key("subject/customer-1")  # another process: reads, finds, reuses
    assert again == written and log.writes == 1


def test_an_opening_key_is_read_once_and_a_missing_one_not_asked_for_again() -> None:
    log = CountingLog(SETTINGS)
    store = _store(log)
    assert store.opening_key("never-written") is None
    reads = log.reads
    _store(log).new_key("never-written")  # written after the answer: not looked for again
    assert store.opening_key("never-written") is None and log.reads == reads
    assert store.opening_key("never-written", wait=0.0) is not None  # wait: read again now


def test_an_opening_key_with_wait_sees_a_tombstone_written_since() -> None:
    log = MemoryLog(SETTINGS)
    store, other = _store(log), _store(log)
    key = other.new_key("r1")
    assert store.opening_key("r1") == key
    other.destroy("r1")
    assert store.held("r1") is not None  # held: no read, the old answer
    assert store.opening_key("r1", wait=0.0) is None


def test_an_opening_key_later_answers_in_a_thread_and_none_once_closed() -> None:
    log = MemoryLog(SETTINGS)
    store = _store(log)
    try:
        key = _store(log).new_key("r1")
        assert store.opening_key_later("r1", 1.0).result(timeout=5) == key
        assert store.opening_key_later("absent", 0.05).result(timeout=5) is None
    finally:
        store.close()
    assert store.opening_key_later("r1", 1.0).result(timeout=0) is None and store.closing


def test_a_submitters_keys_are_acknowledged_at_settle() -> None:
    log = MemoryLog(SETTINGS)
    keys = SubmitterKeys(Sealer(_store(log)), own_producer=True, follow_reads=False)
    keys.for_submission("r1", drawn=True, subject=None)
    assert keys.sealer.keys._pending  # appended, the ack not waited for
    keys.settle()
    assert not keys.sealer.keys._pending
    keys.close()


def test_a_submission_is_sealed_under_its_subjects_key_or_a_drawn_ids_new_one() -> None:
    log = CountingLog(SETTINGS)
    keys = SubmitterKeys(Sealer(_store(log)), own_producer=False, follow_reads=False)
    keys.for_submission("r1", drawn=False, subject="customer-1")
    assert keys.sealer.key_id_for("r1") == "subject/customer-1" and log.writes == 0  # made at encode
    keys.for_submission("r2", drawn=True, subject=None)
    assert keys.sealer.key_id_for("r2") == "r2" and (log.reads, log.writes) == (0, 1)
    keys.for_submission("r3", drawn=False, subject=None)  # a given id: its key is looked up at encode
    assert not keys.sealer.knows_key_of("r3") and log.writes == 1


def test_a_runs_key_is_learnt_by_the_first_read_that_teaches_it() -> None:
    log = MemoryLog(SETTINGS)
    writer = Sealer(_store(log))
    writer.use_subject("r1", "customer-1")
    sealed = writer.seal_text('"hello"', "payload", "r1")
    keys = SubmitterKeys(Sealer(_store(log)), own_producer=False, follow_reads=False)
    calls: list[str] = []

    def teaches() -> None:
        calls.append("teaches")
        keys.sealer.open_text(sealed, "payload", "r1")

    def never_called() -> None:
        calls.append("never")

    assert keys.learn_key_of("r1", [lambda: calls.append("nothing"), teaches, never_called])
    assert calls == ["nothing", "teaches"] and keys.sealer.key_id_for("r1") == "subject/customer-1"
    assert not keys.learn_key_of("r2", [lambda: None])
