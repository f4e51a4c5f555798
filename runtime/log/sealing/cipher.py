"""AES-GCM under one data key, sealing values into their sealed form (runtime.log.records.sealed_form)."""

from __future__ import annotations

import itertools
import os
from binascii import b2a_base64

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runtime.log.records.sealed_form import PREFIX, SEALED_AS


class Cipher:
    """AES-GCM under one key, with the nonces of this process: a 96-bit counter from a random
    start below 2**95. Every writer under a key (a client, the worker, the next owner) draws its
    own start, so two writers' nonces meet only if their ranges overlap -- (n1 + n2) / 2**95 for
    n1 and n2 values sealed, 2**-62 for four billion each -- without a system call per value
    (GCM's one requirement is that a nonce never repeats under a key).

    Sealing is the worker's hot path (about five values a step, sealed as the compiled encoders
    write them: runtime.log.schemas.avro_encoder), costed by the calls it makes: what does not
    change per value -- the text before the ciphertext, each field's associated data, the bound
    ``encrypt`` -- is made once per key."""

    def __init__(self, key_id: str, key: bytes) -> None:
        self.encrypt = AESGCM(key).encrypt
        self.head = f"{PREFIX}{key_id}:".encode()
        self.key_id = key_id
        # field -> its associated data, ``<key id>/<field>``: every field a value is sealed as
        self.ads: dict[str, bytes] = {field: f"{key_id}/{field}".encode() for field in SEALED_AS}
        self.nonces = itertools.count(int.from_bytes(os.urandom(12), "big") >> 1)

    def seal_bytes(self, value: str, field: str) -> bytes:
        """``value`` sealed as ``field``, as the ASCII bytes of its text: what an encoder writes."""
        ad = self.ads.get(field)
        if ad is None:
            ad = self.ads[field] = f"{self.key_id}/{field}".encode()
        nonce = next(self.nonces).to_bytes(12, "big")
        return self.head + b2a_base64(nonce + self.encrypt(nonce, value.encode(), ad), newline=False)

    def seal(self, value: str, field: str) -> str:
        return self.seal_bytes(value, field).decode("ascii")
