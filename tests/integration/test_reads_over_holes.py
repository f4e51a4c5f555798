"""Bounded reads over offsets that deliver nothing (an aborted transaction's records and its marker,
as compaction's holes do): the committed records come back, in order, and a read of several
partitions at once ends at each one's end -- the read counts offsets, and fewer records arrive than
it asked for. (The time it took -- each read waited out a 0.5 s fetch timeout -- is a benchmark figure,
not asserted here.)"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog

pytestmark = pytest.mark.integration


def _with_holes(settings: Settings, topic: str, partition: int) -> None:
    """3 committed records, 5 aborted ones, then 1 committed: offsets 0-2, 9 hold records to read."""
    producer = Producer({**settings.kafka_common(), "transactional.id": f"holes-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"kept {i}".encode(), partition=partition)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted {i}".encode(), partition=partition)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"kept last", partition=partition)
    producer.commit_transaction(30)


def test_reads_skip_an_aborted_transaction_and_end_at_each_partitions_end(deployment: Settings) -> None:
    topic = deployment.events_topic
    _with_holes(deployment, topic, 0)
    _with_holes(deployment, topic, 2)
    log = KafkaLog(deployment)
    try:
        kept = [b"kept 0", b"kept 1", b"kept 2", b"kept last"]
        assert [r.value for r in log.read(topic, 0)] == kept
        assert [r.offset for r in log.read(topic, 0)][:3] == [0, 1, 2]
        got: dict[int, list[bytes | None]] = {}
        for partition, record in log.read_partitions(topic, {0: (None, None), 1: (None, None), 2: (1, None)}):
            got.setdefault(partition, []).append(record.value)
        assert got == {0: kept, 2: kept[1:]}
    finally:
        log.close()
