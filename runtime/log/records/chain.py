"""Each run's records as a hash chain, authenticated with a key only the workers hold.

A record's link is the keyed BLAKE2b-64 MAC (RFC 7693: BLAKE2 keyed is a MAC by design, no HMAC
construction needed) of the run id, the run's previous link and the record's bytes before the
link: it names the run's previous record through that record's link, and covers the record's own
bytes as written -- the framed Avro value, ciphertext and all, so a field encrypted for erasure
still verifies without its key. The link is the Avro field ``chain`` (``bytes``, default empty),
the last field of every event schema, so the value's last 9 bytes are always the length byte 0x10
and the link: sealing and verifying need no Avro at all.

Why 8 bytes: a step writes ~4 records (refund40: 4.05), and the budget is 40 bytes a step; a
16-byte link cost 69 bytes a step (measured), an 8-byte one 36.5. A 64-bit tag cannot be attacked
offline (without the key nobody can check a guess), and every online guess is a record written
for good to the log that parks its run: 2^64 guesses are out of reach (NIST SP 800-107 allows
64-bit tags where guesses are limited this way).

Why BLAKE2b and not HMAC-SHA256: the first version was HMAC-SHA256 (truncated); Python's HMAC
goes through OpenSSL 3.0 here, 2.5 us a record against 0.95 us for keyed BLAKE2b (CPython's own
code), and refund40 measured +17-30% worker CPU a step with it -- over the 10% budget. BLAKE2b is
in every language's standard crypto (libsodium's crypto_generichash, OpenSSL's BLAKE2BMAC).

Why not an ed25519 signature an auditor checks with a public key: a signature is 64 bytes a
record, ~260 a step -- six times the budget -- and signing costs ~50 us a record in
``cryptography``. The price of a MAC: an auditor verifies with the workers' key (``agentlog audit
verify`` runs where that key is), and whoever holds it can forge.

The chain is per run (the Kafka key): the first record of a run chains from the empty link.
Removing the last record of a run is not visible in the chain alone (no record follows it); in
Kafka a record cannot be removed, and the store is checked against Kafka's tip.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from runtime.errors import AgentlogError

LINK_SIZE = 8
_LENGTH_BYTE = LINK_SIZE * 2  # Avro's zigzag varint of the bytes' length, 8
_LENGTH_PREFIX = bytes((_LENGTH_BYTE,))
_UNSEALED = 0  # the empty ``chain`` field: its length 0, the value's last byte
START = b""  # the link a run's first record chains from


class UnsealableRecord(AgentlogError, ValueError):
    """A value whose last byte is not the empty ``chain`` field: its schema does not end with it."""


def link_of(value: bytes) -> bytes | None:
    """The link sealed into ``value``, None when it carries none (an unchained record)."""
    if len(value) > LINK_SIZE and value[-LINK_SIZE - 1] == _LENGTH_BYTE:
        return value[-LINK_SIZE:]
    return None


class ChainKey:
    """The workers' key, keyed once: each link then costs one copy of the keyed hash state."""

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("a chain key cannot be empty")
        # BLAKE2b takes a key of up to 64 bytes; a longer secret is hashed down to one.
        key = secret if len(secret) <= 64 else hashlib.blake2b(secret).digest()
        self._keyed = hashlib.blake2b(key=key, digest_size=LINK_SIZE, person=b"agentlog-chain")

    def mac(self, run_id: bytes, previous: bytes, body: bytes | memoryview) -> bytes:
        h = self._keyed.copy()
        h.update(b"%d:%b%b" % (len(run_id), run_id, previous))  # the length: no run id is another's prefix
        h.update(body)
        return h.digest()


def seal(key: ChainKey, run_id: bytes, previous: bytes, value: bytes) -> bytes:
    """``value`` (encoded with an empty ``chain``) with its link in place of the empty field."""
    if not value or value[-1] != _UNSEALED:
        raise UnsealableRecord("the encoded record does not end with an empty chain field")
    return value[:-1] + _LENGTH_PREFIX + key.mac(run_id, previous, memoryview(value)[:-1])


def verifies(key: ChainKey, run_id: bytes, previous: bytes, value: bytes) -> bool:
    """True if ``value``'s link is the one its bytes and ``previous`` make."""
    link = link_of(value)
    if link is None:
        return False
    return hmac.compare_digest(link, key.mac(run_id, previous, memoryview(value)[: -LINK_SIZE - 1]))


@dataclass(frozen=True)
class Break:
    """The first record of a run that does not follow from its predecessors."""

    index: int  # its place among the run's records given
    kind: str  # "unchained", "reordered", "added, altered or a record before it removed"
    detail: str

    def describe(self, where: str) -> str:
        return f"{where}: {self.kind} ({self.detail})"


class Chain:
    """Follows one run's records in order; ``admit`` says whether each one extends the chain."""

    def __init__(self, key: ChainKey, run_id: str, tip: bytes = START) -> None:
        self.key = key
        self.run_id = run_id.encode()
        self.tip = tip
        self.count = 0
        self._earlier: list[bytes] = []  # links before the tip: tells a reorder from a forgery

    def admit(self, value: bytes) -> Break | None:
        """None and the tip advances, or why ``value`` is not the run's next record (tip kept)."""
        index = self.count
        self.count += 1
        link = link_of(value)
        if link is None:
            return Break(index, "unchained", "the record carries no chain link")
        if verifies(self.key, self.run_id, self.tip, value):
            self._earlier.append(self.tip)
            self.tip = link
            return None
        for previous in reversed(self._earlier):
            if verifies(self.key, self.run_id, previous, value):
                return Break(index, "reordered", "it chains from an earlier record than the one before it")
        if verifies(self.key, self.run_id, START, value) and self.tip != START:
            return Break(index, "reordered", "it chains as the run's first record")
        return Break(
            index,
            "added, altered or a record before it removed",
            "its link does not match its bytes and the previous record",
        )


def first_break(key: ChainKey, run_id: str, values: Iterable[bytes], tip: bytes = START) -> Break | None:
    """The first record of ``values`` (a run's records, in order) that breaks the chain."""
    chain = Chain(key, run_id, tip)
    for value in values:
        found = chain.admit(value)
        if found is not None:
            return found
    return None


def chain_key_of(secret: str) -> ChainKey | None:
    """The key of the ``chain_key`` setting's value; None when it is empty (records unchained)."""
    return ChainKey(secret.encode()) if secret else None
