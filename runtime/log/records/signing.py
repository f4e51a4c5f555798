"""What clients act on, signed by the workers: a run's status-bearing records carry an Ed25519
signature that anyone holding the workers' public key can check.

The chain (runtime.log.records.chain) proves a run's history to whoever holds the workers' MAC
key -- workers and auditors -- and a client must not hold it (whoever holds it can forge). So the
records a client turns into a run's state or result -- those of :data:`SIGNED_TYPES`, the events of
``runtime.log.records.status.STATUS_BY_EVENT``: RunStarted, the endings, RunParked -- carry a
signature (the Avro field ``signature``, bytes, default empty, placed just before ``chain``) made
with the workers' private key over the run id, the run's previous link and the record's bytes
before the signature. The link that follows covers the signature, so for a MAC-key holder the
signed record is also a link of the whole history; for a client it proves that a worker wrote
these bytes for this run, after the record whose link it names. Two of them a run, not one per
record: 65 bytes each and ~0.1 ms of a worker's CPU a run where a signature on every record would cost
~260 bytes and ~0.4 ms a step (the chain's docstring).

What a client checks (:class:`Vouching`): a status-bearing record whose signature does not verify
with the previous link of any record before it in the run (nearest first: a forged record between
two genuine ones does not make the second one look forged), or that repeats a signed record read
before (a copy), is forged: not applied to the run's status or result, and named. Other records
are not checked by clients (they cannot: only the MAC key proves them) -- a forged
``ToolCallHeartbeat`` can still show in ``status``'s heartbeats; the owner parks a run such a
record lands in (runtime.worker.foreign), and ``agentlog audit verify`` names it.

Bytes: an unsigned, unsealed value ends ``00 00`` (both fields empty); signing writes the
signature over the first (``80 01``, the zigzag length 64, then 64 bytes), sealing then writes
the link over the last.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from runtime.errors import AgentlogError
from runtime.log.records.chain import LINK_SIZE, START, link_of
from runtime.log.records.status import ENDED, STATUS_BY_EVENT

SIGNATURE_SIZE = 64
_FIELD = b"\x80\x01"  # Avro's zigzag varint of 64: the signature field's length prefix
_SIGNED_FIELD = len(_FIELD) + SIGNATURE_SIZE
_CONTEXT = b"agentlog-sign\x00"  # no signature made for another purpose verifies as one of these

# The record types whose signature clients check: every event that sets a run's status.
SIGNED_TYPES: frozenset[str] = frozenset(STATUS_BY_EVENT)


class BadKey(AgentlogError, ValueError):
    """A signing or verify key setting that is not an Ed25519 key."""


class UnsignableRecord(AgentlogError, ValueError):
    """A value that does not end with the empty ``signature`` and ``chain`` fields."""


def _raw_or_pem(text: str, setting: str) -> bytes | None:
    """The 32 raw bytes of a base64 value; None if ``text`` is PEM."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise BadKey(f"{setting} is neither PEM nor base64: {error}") from None
    if len(raw) != 32:
        raise BadKey(f"{setting} is {len(raw)} bytes once base64-decoded; an Ed25519 key is 32")
    return raw


def signing_key_of(text: str) -> Ed25519PrivateKey | None:
    """The ``signing_key`` setting (PEM PKCS#8, or the raw 32 bytes in base64); None when empty."""
    if not text:
        return None
    raw = _raw_or_pem(text, "signing_key (AGENTLOG_SIGNING_KEY)")
    if raw is not None:
        return Ed25519PrivateKey.from_private_bytes(raw)
    key = serialization.load_pem_private_key(text.strip().encode(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise BadKey(f"signing_key (AGENTLOG_SIGNING_KEY) is a {type(key).__name__}, not an Ed25519 key")
    return key


def verify_key_of(text: str) -> Ed25519PublicKey | None:
    """The ``verify_key`` setting (PEM SubjectPublicKeyInfo, or the raw 32 bytes in base64); None when empty."""
    if not text:
        return None
    raw = _raw_or_pem(text, "verify_key (AGENTLOG_VERIFY_KEY)")
    if raw is not None:
        return Ed25519PublicKey.from_public_bytes(raw)
    key = serialization.load_pem_public_key(text.strip().encode())
    if not isinstance(key, Ed25519PublicKey):
        raise BadKey(f"verify_key (AGENTLOG_VERIFY_KEY) is a {type(key).__name__}, not an Ed25519 key")
    return key


def public_text(key: Ed25519PrivateKey) -> str:
    """The verify key of ``key``, as the ``verify_key`` setting takes it (base64 of 32 bytes)."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def _message(run_id: bytes, previous: bytes, body: bytes) -> bytes:
    return b"%b%d:%b%d:%b%b" % (_CONTEXT, len(run_id), run_id, len(previous), previous, body)


def sign(key: Ed25519PrivateKey, run_id: bytes, previous: bytes, value: bytes) -> bytes:
    """``value`` (encoded with empty ``signature`` and ``chain``, not sealed) signed: ready to seal."""
    if len(value) < 2 or value[-2:] != b"\x00\x00":
        raise UnsignableRecord("the encoded record does not end with empty signature and chain fields")
    body = value[:-2]
    return body + _FIELD + key.sign(_message(run_id, previous, body)) + b"\x00"


def signature_of(value: bytes) -> tuple[int, bytes] | None:
    """(where the signature field starts, the signature) of a signed value; None if unsigned."""
    # An unchained value whose signature has the link's length byte 9 bytes from the end looks
    # chained to link_of (1 in 256 of them): where the chained reading finds no field, try the other.
    ends = (len(value) - LINK_SIZE - 1, len(value) - 1) if link_of(value) is not None else (len(value) - 1,)
    for end in ends:
        start = end - _SIGNED_FIELD
        if start >= 0 and value[start : start + len(_FIELD)] == _FIELD:
            return start, value[start + len(_FIELD) : end]
    return None


def signed_by(key: Ed25519PublicKey, run_id: bytes, previous: bytes, value: bytes) -> bool:
    """True if ``value`` carries a signature of ``key`` over ``run_id``, ``previous`` and its bytes."""
    found = signature_of(value)
    if found is None:
        return False
    start, signature = found
    try:
        key.verify(signature, _message(run_id, previous, value[:start]))
    except InvalidSignature:
        return False
    return True


class Vouching:
    """Follows one run's records in log order (fenced ones left out); ``admit`` says why a
    status-bearing one is forged, or None. ``complete``: the run's first record was admitted, so
    every link a worker may have signed after is known (a read from the middle of a run cannot
    tell a genuine status record from a forged one, and says nothing)."""

    def __init__(self, key: Ed25519PublicKey, run_id: str) -> None:
        self.key = key
        self.run_id = run_id.encode()
        self.links: list[bytes] = []  # each admitted record's link, in order
        self.signed: set[bytes] = set()  # the signed records' bytes seen: a copy is forged
        self.ended = False  # a signed ending was admitted: nothing genuine follows it
        self.complete = False

    def admit(self, value: bytes, record_type: str, *, first: bool = False) -> str | None:
        """Why the record is not one a worker wrote, or None (also for records clients cannot
        check). ``first``: the record is where the run starts (its RunStarted or RunRejected)."""
        self.complete = self.complete or first
        verdict: str | None = None
        if record_type in SIGNED_TYPES and self.complete:
            verdict = self._check(value)
            if verdict is None and STATUS_BY_EVENT[record_type] in ENDED:
                self.ended = True
        elif self.ended and self.complete:
            verdict = "written after the run's end (no worker writes there)"
        link = link_of(value)
        if link is not None:
            self.links.append(link)
        return verdict

    def _check(self, value: bytes) -> str | None:
        if signature_of(value) is None:
            return "it carries no worker's signature"
        if value in self.signed:
            return "a copy of a signed record before it"
        if not any(signed_by(self.key, self.run_id, previous, value) for previous in self._previous()):
            return "its signature is not a worker's over its bytes and the run's records before it"
        self.signed.add(value)
        return None

    def _previous(self) -> Iterable[bytes]:
        seen: set[bytes] = set()
        for link in reversed(self.links):
            if link not in seen:
                seen.add(link)
                yield link
        if START not in seen:
            yield START
