"""The sink's fencing verdicts equal runtime.log.records.fencing.FenceFilter's, whatever the batching and restarts.

The sink computes the rule in SQL over each batch, carrying the watermark between batches in
memory and across restarts through the store; this test holds it to the reference implementation
on randomly interleaved claims, current writers and zombies.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from analytics.store import open_client, parse_dsn
from consumers.batch import Batch
from consumers.registry import WriterSchemas
from consumers.store_writer import StoreWriter
from runtime.config import Settings
from runtime.log.records import events as ev
from runtime.log.records.fencing import FenceFilter
from runtime.log.schemas.registry import registry_client
from runtime.log.schemas.serde import Serde
from support.sink import EventLog, make_deployment, read_partition

pytestmark = pytest.mark.integration


def _scenario(log: EventLog, partition: int, rng: random.Random, steps: int) -> None:
    """Workers claim the partition in turn; every writer, current or fenced, keeps appending."""
    epochs: list[int] = [-1]  # a writer that never claimed (epoch -1) may write before the first claim
    seq = 0
    for _ in range(steps):
        if rng.random() < 0.15:
            epochs.append(log.claim(partition, worker=f"w{len(epochs)}"))
            continue
        seq += 1
        epoch = epochs[-1] if rng.random() < 0.6 else rng.choice(epochs)
        record = ev.TimerFired(
            run_id=f"run-{partition}", seq=seq, epoch=epoch, worker="w", occurred_at=seq, position=seq
        )
        log.append([record], partition=partition)


def test_sql_fencing_agrees_with_fence_filter_across_batches_and_restarts(
    services: Settings, tmp_path: Path
) -> None:
    settings = make_deployment(services, partitions=3)
    log = EventLog(settings)
    rng = random.Random(20250101)
    for partition in range(settings.partitions):
        _scenario(log, partition, rng, steps=60)

    serde = Serde(settings)
    messages = {p: read_partition(settings, p) for p in range(settings.partitions)}
    expected: dict[tuple[int, int], int] = {}
    for p, partition_messages in messages.items():
        fence = FenceFilter()
        for message in partition_messages:
            record = serde.decode(message.value() or b"", message.key())
            assert isinstance(record, ev.Event)
            expected[(p, int(message.offset() or 0))] = (
                0 if fence.admit(record, int(message.offset() or 0)) else 1
            )
    assert 0 < sum(expected.values()) < len(expected)  # the scenario has both fenced and admitted records

    # Interleave partitions, cut into random batches, restart the writer now and then.
    cursors = {p: 0 for p in messages}
    client = open_client(parse_dsn(f"chdb://{tmp_path / 'analytics'}"))
    try:
        writer = StoreWriter(client, settings.events_topic, WriterSchemas(registry_client(settings)))
        next_offsets = dict(writer.prepare().next_offsets)
        while any(cursors[p] < len(messages[p]) for p in messages):
            batch = Batch()
            for _ in range(rng.randint(1, 25)):
                open_partitions = [p for p in messages if cursors[p] < len(messages[p])]
                if not open_partitions:
                    break
                p = rng.choice(open_partitions)
                message = messages[p][cursors[p]]
                cursors[p] += 1
                batch.add(p, int(message.offset() or 0), message.key(), message.value())
                next_offsets[p] = int(message.offset() or 0) + 1
            batch.seal(next_offsets)
            writer.write(batch, batch.token(settings.events_topic))
            if rng.random() < 0.3:  # a restart: the watermarks come back from the store
                writer = StoreWriter(client, settings.events_topic, WriterSchemas(registry_client(settings)))
                assert writer.prepare().next_offsets == next_offsets
        got = {
            (int(p), int(o)): int(f)
            for p, o, f in client.query("SELECT partition, offset, fenced FROM agentlog.events").result_rows
        }
    finally:
        client.close()
    assert got == expected
