"""The sink's fencing verdicts equal runtime.log.records.fencing.FenceFilter's, whatever the batching and restarts.

The sink computes the rule in SQL over each batch, carrying the watermark between batches in
memory and across restarts through the store; this test holds it to the reference implementation
on randomly interleaved claims, current writers and zombies.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics.store import open_client, parse_dsn
from consumers.batch import Batch
from consumers.claims import StoreClaims
from consumers.registry import WriterSchemas
from consumers.store_writer import StoreWriter
from runtime.config import Settings
from runtime.log.records import events as ev
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import ClaimCheck, claim_signature
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


def test_a_forged_claim_fences_nothing_in_the_store_and_a_genuine_one_still_fences(
    services: Settings, tmp_path: Path
) -> None:
    """With the workers' public key the sink stores a forged claim fenced and raising nothing; its
    verdicts equal FenceFilter(claims=...)'s, across a restart (a copy stays a copy)."""
    settings = make_deployment(services, partitions=1)
    log = EventLog(settings)
    signer = Ed25519PrivateKey.generate()

    def claim(worker: str, key: Ed25519PrivateKey | None = signer) -> ev.EpochClaimed:
        unsigned = ev.EpochClaimed(run_id="", partition=0, worker=worker, occurred_at=int(time.time() * 1000))
        return unsigned if key is None else replace(unsigned, signature=claim_signature(key, unsigned))

    def step(seq: int, epoch: int) -> ev.Event:
        return ev.TimerFired(run_id="run", seq=seq, epoch=epoch, worker="w", occurred_at=seq, position=seq)

    genuine = claim("w1")
    first = log.append([genuine], partition=0)[0]
    second = first + 8
    offsets = log.append(
        [
            step(1, first),
            claim("forger", Ed25519PrivateKey.generate()),  # signed with another key
            step(2, first),
            claim("forger", None),  # unsigned
            step(3, first),
            genuine,  # a copy, read after a restart: the second batch starts here
            step(4, first),
            claim("w2"),  # a genuine takeover
            step(5, first),  # now a zombie's
            step(6, second),
        ],
        partition=0,
    )
    del log  # its producer closes with it
    assert offsets[7] == second
    cut = offsets[5]

    serde = Serde(settings)
    messages = read_partition(settings, 0)
    fence = FenceFilter(claims=ClaimCheck(signer.public_key(), 0))
    expected = {}
    for message in messages:
        offset = int(message.offset() or 0)
        record = serde.decode(message.value() or b"", message.key())
        assert isinstance(record, ev.Event)
        expected[offset] = 0 if fence.admit(record, offset) else 1
    assert [offset for offset, _ in fence.forged] == [first + 2, first + 4, cut]
    assert [o for o, f in expected.items() if f and o not in dict(fence.forged)] == [second + 1]  # step 5

    client = open_client(parse_dsn(f"chdb://{tmp_path / 'analytics'}"))
    try:
        for part in (
            [m for m in messages if int(m.offset() or 0) < cut],
            [m for m in messages if m.offset() >= cut],
        ):
            writer = StoreWriter(
                client,
                settings.events_topic,
                WriterSchemas(registry_client(settings)),
                StoreClaims(signer.public_key()),
            )
            next_offsets = dict(writer.prepare().next_offsets)
            batch = Batch()
            for message in part:
                batch.add(0, int(message.offset() or 0), message.key(), message.value())
                next_offsets[0] = int(message.offset() or 0) + 1
            batch.seal(next_offsets)
            writer.write(batch, batch.token(settings.events_topic))
        got = {
            int(o): int(f) for o, f in client.query("SELECT offset, fenced FROM agentlog.events").result_rows
        }
    finally:
        client.close()
    assert got == expected
