"""Partition records signed by the workers (runtime.log.records.partition_signing): claims checked
by every reader's fence, checkpoints and snapshots checked by a rebuild, on real encoded records
and the in-memory log."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import (
    CheckpointSnapshots,
    EpochClaimed,
    HistorySnapshot,
    PartitionCheckpoint,
    RunStarted,
)
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import (
    ClaimCheck,
    UnsignablePartitionRecord,
    claim_signature,
    partition_verify_key,
    sign_value,
    value_forged,
)
from runtime.log.records.signing import public_text
from runtime.log.schemas.catalog import load_catalog
from runtime.log.schemas.serde import Serde
from runtime.worker.metrics import WorkerMetrics
from runtime.worker.partition_forgery import PartitionForgeries
from runtime.worker.rebuild import checkpoint_key, claim, latest_checkpoint, rebuild
from runtime.worker.snapshots import snapshot_key

pytestmark = pytest.mark.unit

# A fixed key: Ed25519 signs deterministically, so every run signs the same bytes. With a random key
# one run in 256 made a signature ending in 0x00, which reads as an empty signature field's end.
SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC = SIGNER.public_key()
SIGNING_KEY = base64.b64encode(
    SIGNER.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
).decode()
SETTINGS = Settings(partitions=1, signing_key=SIGNING_KEY)


@pytest.fixture(scope="module")
def serde() -> Serde:
    return Serde.offline(SETTINGS)


def _claim(partition: int = 0, worker: str = "w1", signer: Ed25519PrivateKey | None = SIGNER) -> EpochClaimed:
    claim = EpochClaimed(run_id="", partition=partition, worker=worker, occurred_at=1_764_750_000_000)
    return claim if signer is None else replace(claim, signature=claim_signature(signer, claim))


def test_every_partition_schema_has_a_signature_with_a_default() -> None:
    for name in ("EpochClaimed", "PartitionCheckpoint", "CheckpointSnapshots", "HistorySnapshot"):
        fields = load_catalog()[name].parsed["fields"]
        signature = next(f for f in fields if f["name"] == "signature")
        assert signature["type"] == "bytes" and signature["default"] == "", name
        names = [f["name"] for f in fields]
        assert (names[-1] == "chain" and names[-2] == "signature") or names[-1] == "signature", name


def test_a_signed_claim_passes_and_forged_ones_are_named(serde: Serde) -> None:
    genuine = serde.decode(serde.encode(_claim()))  # the signature survives the round trip
    assert isinstance(genuine, EpochClaimed) and len(genuine.signature) == 64
    assert ClaimCheck(PUBLIC, 0).forged(genuine) is None
    assert ClaimCheck(PUBLIC, 0).forged(_claim(signer=None)) == "it carries no worker's signature"
    wrong = ClaimCheck(PUBLIC, 0).forged(_claim(signer=Ed25519PrivateKey.generate()))
    assert wrong is not None and "not a worker's" in wrong
    altered = ClaimCheck(PUBLIC, 0).forged(replace(genuine, worker="w2"))  # another worker's name
    assert altered is not None and "not a worker's" in altered
    elsewhere = ClaimCheck(PUBLIC, 1).forged(genuine)  # a genuine claim copied to another partition
    assert elsewhere is not None and "partition 0, read in partition 1" in elsewhere
    check = ClaimCheck(PUBLIC, 0)
    assert check.forged(genuine) is None
    assert check.forged(genuine) == "a copy of a claim read before"
    own = ClaimCheck(PUBLIC, 0, own=genuine.signature)  # the owner's tail knows its own claim
    assert own.forged(genuine) == "a copy of a claim read before"


def test_a_forged_claim_does_not_raise_the_watermark() -> None:
    genuine, forged = _claim(), _claim(worker="thief", signer=None)
    record = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0, epoch=10)
    # Without the key the forgery fences the real owner's next record: what a stolen credential did.
    plain = FenceFilter()
    assert plain.admit(genuine, 10) and plain.admit(forged, 11)
    assert not plain.admit(record, 12)
    checked = FenceFilter(claims=ClaimCheck(PUBLIC, 0))
    assert checked.admit(genuine, 10)
    assert not checked.admit(forged, 11)  # not part of the log
    assert checked.admit(record, 12) and checked.watermark == 10 and checked.fenced_count == 0
    assert checked.forged == [(11, "it carries no worker's signature")]


@pytest.mark.parametrize(
    ("record", "key"),
    [
        (
            PartitionCheckpoint(
                run_id="", partition=0, covered_offset=5, commands_offset=2, active_runs={"r": 1}
            ),
            b"checkpoint/0",
        ),
        (
            CheckpointSnapshots(run_id="", partition=0, covered_offset=5, snapshot_through={"r": 5}),
            b"vouched/0",
        ),
        (
            HistorySnapshot(
                run_id="r", partition=0, first_offset=1, through_offset=5, records=[b"x"], sha256="00"
            ),
            b"snapshot/r",
        ),
    ],
)
def test_a_checkpoints_record_is_signed_for_its_key(
    serde: Serde, record: PartitionCheckpoint | CheckpointSnapshots | HistorySnapshot, key: bytes
) -> None:
    kind = type(record)
    plain = serde.encode(record)
    signed = sign_value(SIGNER, key, kind, plain)
    assert len(signed) - len(plain) == 65  # the 64 bytes and their length, in place of the empty field
    decoded = serde.decode(signed, key)
    assert isinstance(decoded, kind) and len(decoded.signature) == 64
    assert replace(decoded, signature=b"", schema_version=0, run_id=record.run_id) == record
    assert value_forged(PUBLIC, key, kind, signed) is None
    assert value_forged(PUBLIC, key, kind, plain) == "it carries no worker's signature"
    moved = value_forged(PUBLIC, key + b"1", kind, signed)  # another partition's or run's key
    assert moved is not None and "not a worker's" in moved
    other = sign_value(Ed25519PrivateKey.generate(), key, kind, plain)
    assert value_forged(PUBLIC, key, kind, other) is not None
    assert sign_value(None, key, kind, plain) == plain  # no signing key: written as before
    with pytest.raises(UnsignablePartitionRecord):
        sign_value(SIGNER, key, kind, signed)


def test_the_workers_check_with_the_verify_key_or_their_own_public_half() -> None:
    assert partition_verify_key("", "") is None
    own = partition_verify_key(SIGNING_KEY, "")
    assert own is not None and public_text(SIGNER) == base64.b64encode(own.public_bytes_raw()).decode()
    other = Ed25519PrivateKey.generate()
    given = partition_verify_key(SIGNING_KEY, public_text(other))
    assert given is not None and given.public_bytes_raw() == other.public_key().public_bytes_raw()


def test_a_rebuild_ignores_a_forged_claim_and_distrusts_a_forged_checkpoint(serde: Serde) -> None:
    log = MemoryLog(SETTINGS)
    topic = SETTINGS.events_topic
    first = claim(SETTINGS, serde, log, 0, "w1").result()
    started = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0, epoch=first, worker="w1")
    log.append(topic, 0, b"r", serde.encode(started)).result()
    forged_at = log.append(topic, 0, None, serde.encode(_claim(worker="thief", signer=None))).result()
    # The owner goes on writing after the forgery: a genuine record of its epoch.
    log.append(topic, 0, b"r2", serde.encode(replace(started, run_id="r2"))).result()
    # A forged checkpoint that says nothing is active: trusted, it would drop both runs.
    fake = PartitionCheckpoint(run_id="", partition=0, covered_offset=forged_at + 2, commands_offset=1)
    log.append(SETTINGS.checkpoints_topic, 0, checkpoint_key(0), serde.encode(fake)).result()
    epoch = claim(SETTINGS, serde, log, 0, "w2").result()

    rebuilt = rebuild(SETTINGS, serde, log, 0, epoch)
    assert rebuilt.checkpoint is None  # not trusted: the history is read from the start
    assert sorted(rebuilt.active) == ["r", "r2"] and rebuilt.fenced == 0
    named = rebuilt.forged_partition_records
    assert len(named) == 2, named
    assert any(f"@{forged_at} (EpochClaimed)" in n and "fences nothing" in n for n in named), named
    assert any("(PartitionCheckpoint)" in n and "reads the history" in n for n in named), named
    # Without the workers' key the forged checkpoint is trusted: both runs are dropped.
    unkeyed = Settings(partitions=1)
    blind = rebuild(unkeyed, Serde.offline(unkeyed), log, 0, epoch)
    assert blind.checkpoint is not None and blind.checkpoint.covered_offset == fake.covered_offset
    assert blind.active == {} and blind.forged_partition_records == []


def test_a_genuine_checkpoint_is_trusted(serde: Serde) -> None:
    log = MemoryLog(SETTINGS)
    first = claim(SETTINGS, serde, log, 0, "w1").result()
    started = RunStarted(run_id="r", workflow="w", input="{}", command_offset=0, epoch=first, worker="w1")
    at = log.append(SETTINGS.events_topic, 0, b"r", serde.encode(started)).result()
    checkpoint = PartitionCheckpoint(
        run_id="", partition=0, covered_offset=at + 1, commands_offset=1, active_runs={"r": at}
    )
    value = sign_value(SIGNER, checkpoint_key(0), PartitionCheckpoint, serde.encode(checkpoint))
    log.append(SETTINGS.checkpoints_topic, 0, checkpoint_key(0), value).result()
    rebuilt = rebuild(SETTINGS, serde, log, 0, claim(SETTINGS, serde, log, 0, "w2").result())
    assert rebuilt.checkpoint is not None and rebuilt.checkpoint.covered_offset == at + 1
    assert list(rebuilt.active) == ["r"] and rebuilt.forged_partition_records == []


def test_the_owners_tail_takes_no_forged_claim_for_a_newer_one(
    serde: Serde, caplog: pytest.LogCaptureFixture
) -> None:
    forgeries = PartitionForgeries(SETTINGS, serde, WorkerMetrics())
    mine = _claim(worker="w1")
    forgeries.own[0] = mine.signature
    newer = _claim(worker="w2")
    assert forgeries.is_claim(0, serde.encode(newer))  # a peer's signed claim: the partition is lost
    forged = serde.encode(_claim(worker="thief", signer=None))
    assert not forgeries.is_claim(0, forged)
    assert not forgeries.is_claim(0, forged)  # read twice by the tail: named once
    assert not forgeries.is_claim(0, serde.encode(mine))  # a copy of its own claim
    assert not forgeries.is_claim(1, serde.encode(newer))  # a claim of partition 0 copied to 1
    assert forgeries.metrics.forged_partition_records == {"EpochClaimed": 3}
    lines = [r.getMessage() for r in caplog.records if "forged_partition_record" in r.getMessage()]
    assert len(lines) == 3 and "thief" in lines[0] and "no worker's signature" in lines[0], lines
    unkeyed = Settings(partitions=1)
    assert PartitionForgeries(unkeyed, Serde.offline(unkeyed), WorkerMetrics()).is_claim(0, forged)


def test_a_forged_newest_checkpoint_falls_back_to_a_genuine_one_and_a_forged_snapshot_is_dropped(
    serde: Serde,
) -> None:
    log = MemoryLog(SETTINGS)
    topic = SETTINGS.checkpoints_topic
    genuine = PartitionCheckpoint(
        run_id="", partition=0, covered_offset=5, commands_offset=1, active_runs={"r": 1}
    )
    log.append(
        topic,
        0,
        checkpoint_key(0),
        sign_value(SIGNER, checkpoint_key(0), PartitionCheckpoint, serde.encode(genuine)),
    )
    newest = replace(genuine, covered_offset=500, active_runs={})
    log.append(topic, 0, checkpoint_key(0), serde.encode(newest)).result()
    snapshot = HistorySnapshot(
        run_id="r", partition=0, first_offset=1, through_offset=5, records=[b"x"], sha256="00"
    )
    log.append(topic, 0, snapshot_key("r"), serde.encode(snapshot)).result()

    read = latest_checkpoint(SETTINGS, serde, log, 0)
    assert read.checkpoint is not None and read.checkpoint.covered_offset == 5
    assert read.snapshots == {}  # its run is read from its first offset
    assert [f.split(" (")[1].split(")")[0] for f in read.forged] == ["PartitionCheckpoint", "HistorySnapshot"]
    unkeyed = Settings(partitions=1)
    blind = latest_checkpoint(unkeyed, Serde.offline(unkeyed), log, 0)
    assert blind.checkpoint is not None and blind.checkpoint.covered_offset == 500 and "r" in blind.snapshots
