"""Partition records signed by the workers: claims, checkpoints and snapshots a reader can check.

The records that decide whose writes count and where a rebuild starts -- ``EpochClaimed`` in the
events topic, ``PartitionCheckpoint``, ``CheckpointSnapshots`` and ``HistorySnapshot`` in the
checkpoints topic -- belong to no run, so the run chain (runtime.log.records.chain) does not cover
them, and without a signature a forged claim (a stolen admin credential) would fence the real
owner's records for every reader, and a forged checkpoint would tell a rebuild to skip a run. With
the workers' signing key (``AGENTLOG_SIGNING_KEY``, the key of runtime.log.records.signing) each
carries an Ed25519 signature in its ``signature`` field; with the public key a reader checks it:

- a claim (:class:`ClaimCheck`): over the partition, the previous epoch, the time and the worker
  -- its fields, not its bytes, so every reader checks it from the decoded record
  (runtime.log.records.fencing takes it there). Read in another partition than the one it names,
  unsigned, wrongly signed, or the same signature as a claim read before (a copy): forged, and it
  fences nothing.
- a checkpoints-topic record (:func:`sign_value` / :func:`value_forged`): over its key in the
  checkpoints topic (``checkpoint/<p>``, ``snapshots/<p>``, ``snapshot/<run>``: bound to its
  partition or run) and its bytes before the signature. A rebuild trusts none that fails: it reads
  the history instead.

Cost: one signature a claim and one a checkpoint round (~50 us each, every few seconds at most),
65 bytes each; nothing a step.

What it does not stop: a copy of a genuine claim appended later, read by a reader that did not
read the original (the copy's bytes are a worker's). Such a copy fences the owner's later records
for that reader; the owner's own tail catches a copy of its own claim (it knows it), and the sink
(consumers.claims) every copy, reading every claim. Why no cheap binding tells a copy apart:
docs/tamper-evident-history.md, "Not covered".
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from runtime.errors import AgentlogError
from runtime.log.records.events import EpochClaimed, Event, Record
from runtime.log.records.signing import SIGNATURE_SIZE, signing_key_of, verify_key_of

_CLAIM_CONTEXT = b"agentlog-claim\x00"
_VALUE_CONTEXT = b"agentlog-partition-record\x00"
_FIELD = b"\x80\x01"  # Avro's zigzag varint of 64: the signature field's length prefix
_SIGNED_FIELD = len(_FIELD) + SIGNATURE_SIZE


class UnsignablePartitionRecord(AgentlogError, ValueError):
    """An encoded value that does not end with an empty ``signature`` (and, on events, ``chain``)."""


def partition_verify_key(signing_key: str, verify_key: str) -> Ed25519PublicKey | None:
    """The key partition records are checked with: the ``verify_key`` setting, else the public half
    of the ``signing_key`` setting (a worker checks what its peers signed); None with neither."""
    public = verify_key_of(verify_key)
    if public is not None:
        return public
    private = signing_key_of(signing_key)
    return None if private is None else private.public_key()


def _claim_message(claim: EpochClaimed) -> bytes:
    worker = claim.worker.encode()
    return b"%b%d:%d:%d:%d:%b" % (
        _CLAIM_CONTEXT,
        claim.partition,
        claim.previous_epoch,
        claim.occurred_at,
        len(worker),
        worker,
    )


def claim_signature(key: Ed25519PrivateKey, claim: EpochClaimed) -> bytes:
    """The signature to put in ``claim.signature``."""
    return key.sign(_claim_message(claim))


def claim_check(key: Ed25519PublicKey | None, partition: int) -> ClaimCheck | None:
    """A reader's check of ``partition``'s claims with the workers' public key; None without one."""
    return None if key is None else ClaimCheck(key, partition)


class ClaimCheck:
    """Tells the claims a worker signed from forged ones, for one partition's reader.

    ``own``: the signature of a claim the reader wrote itself (the owner's tail, which reads from
    after it): a copy of it is not a newer claim."""

    def __init__(self, key: Ed25519PublicKey, partition: int, own: bytes = b"") -> None:
        self.key = key
        self.partition = partition
        self.seen: set[bytes] = {own} if own else set()

    def forged(self, claim: EpochClaimed) -> str | None:
        """Why ``claim`` is not one a worker wrote for this partition, or None (and it is noted)."""
        if claim.partition != self.partition:
            return f"it claims partition {claim.partition}, read in partition {self.partition}"
        if not claim.signature:
            return "it carries no worker's signature"
        if claim.signature in self.seen:
            return "a copy of a claim read before"
        try:
            self.key.verify(claim.signature, _claim_message(claim))
        except InvalidSignature:
            return "its signature is not a worker's over its fields"
        self.seen.add(claim.signature)
        return None


def _tail(kind: type[Record]) -> int:
    """Bytes after the signature field: the empty ``chain`` of an event schema, else none."""
    return 1 if issubclass(kind, Event) else 0


def _message(topic_key: bytes, body: bytes) -> bytes:
    return b"%b%d:%b%b" % (_VALUE_CONTEXT, len(topic_key), topic_key, body)


def sign_value(key: Ed25519PrivateKey | None, topic_key: bytes, kind: type[Record], value: bytes) -> bytes:
    """``value`` (a ``kind`` encoded, its signature empty) signed for ``topic_key``; as is without a key."""
    if key is None:
        return value
    tail = _tail(kind)
    end = len(value) - 1 - tail
    # A guard against a caller's mistake (signing a value twice), not a check of the value: a signed
    # value whose signature happens to end in 0x00 (one in 256) passes it where the field comes last.
    if end < 0 or value[end:] != b"\x00" * (1 + tail):
        raise UnsignablePartitionRecord(f"the encoded {kind.__name__} does not end with an empty signature")
    body = value[:end]
    return body + _FIELD + key.sign(_message(topic_key, body)) + value[end + 1 :]


def value_forged(key: Ed25519PublicKey, topic_key: bytes, kind: type[Record], value: bytes) -> str | None:
    """Why ``value`` (a ``kind`` read under ``topic_key``) is not one a worker signed, or None."""
    start = len(value) - _tail(kind) - _SIGNED_FIELD
    if start < 0 or value[start : start + len(_FIELD)] != _FIELD:
        return "it carries no worker's signature"
    signature = value[start + len(_FIELD) : start + _SIGNED_FIELD]
    try:
        key.verify(signature, _message(topic_key, value[:start]))
    except InvalidSignature:
        return f"its signature is not a worker's over its bytes under the key {topic_key.decode(errors='replace')}"
    return None
