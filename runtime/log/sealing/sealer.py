"""The sealer: seals the content fields of records before they are encoded, and opens them after.

Crypto-shredding: Kafka's topics are immutable and kept forever; a person's messages cannot be cut
out of them. So the *contents* of a run -- its input, call arguments (model-call messages among
them), call results, its result, signal payloads -- are written sealed: AES-GCM under a 256-bit
data key of the run (or of a data subject; runtime.log.sealing.keys), in the sealed form of
runtime.log.records.sealed_form. Everything else stays in the clear -- record types, ids, sequence
numbers, hashes, token counts, costs, timings -- so the structure of an erased run remains
auditable.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runtime.errors import AgentlogError
from runtime.log.records.events import Record
from runtime.log.records.sealed_form import (
    CONTENT_FIELDS,
    ERASED,
    PREFIX,
    SUBJECT_PREFIX,
    is_sealed,
    key_id_of,
    subject_key_id,
)
from runtime.log.sealing.cipher import Cipher
from runtime.log.sealing.keys import KEY_ARRIVAL_TIMEOUT, KeyStore

# The ciphers (sealing and opening) a process keeps, one per key: a cache, rebuilt from the cached
# key on its next use, so a client that submits millions of runs does not keep one per run. (A
# worker drops a run's own as the run ends: ``Sealer.forget_run``.)
CACHED_CIPHERS = 4096


class SealError(AgentlogError):
    """A sealed value that its key does not open: altered, or sealed under another key."""


class KeyPending(AgentlogError):
    """A submission names a key this process has not cached, and its reader asked not to wait for
    it on its own thread (``Sealer.wait_for_keys`` False: a worker's event loop). The reader fetches
    it elsewhere (``KeyStore.opening_key_later``) and decodes the record again once it has arrived."""

    def __init__(self, key_id: str, run_id: str) -> None:
        super().__init__(f"the data key {key_id!r} of run {run_id or '?'} is not cached yet")
        self.key_id = key_id
        self.run_id = run_id


def _bound(cache: dict[str, Any]) -> None:
    """Drop ``cache``'s oldest entries past ``CACHED_CIPHERS`` (called where one is added)."""
    while len(cache) > CACHED_CIPHERS:
        del cache[next(iter(cache))]


class Sealer:
    """Seals the content fields of records before they are encoded, and opens them after decoding."""

    # False (a worker): a submission whose key is not cached raises KeyPending rather than waiting
    # for the key on the decoding thread -- the worker's event loop, which every other run of the
    # worker needs (runtime.worker.commands holds the command and fetches the key).
    wait_for_keys: bool = True

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._aeads: dict[str, AESGCM] = {}  # key id -> the cipher that opens
        self._ciphers: dict[str, Cipher] = {}  # key id -> the cipher that seals, with its nonces
        # run id -> the key id its contents are sealed under, learnt from what was submitted or read
        self._key_of_run: dict[str, str] = {}
        # run id -> its sealing cipher: one lookup a record (the key id resolved once a run)
        self._by_run: dict[str, Cipher] = {}

    def use_subject(self, run_id: str, subject: str) -> None:
        """Seal ``run_id``'s contents under ``subject``'s key (``Client.submit(..., subject=)``)."""
        self._key_of_run[run_id] = subject_key_id(subject)
        self._by_run.pop(run_id, None)

    def use_new_key(self, run_id: str) -> None:
        """Seal ``run_id``'s contents under a key of its own made now, without looking for one:
        the caller has just drawn ``run_id`` at random (``Client.submit`` without an id)."""
        if run_id not in self._key_of_run and run_id not in self._ciphers:
            self._ciphers[run_id] = Cipher(run_id, self.keys.new_key(run_id))
            _bound(self._ciphers)

    def key_id_for(self, run_id: str) -> str:
        return self._key_of_run.get(run_id, run_id)

    def knows_key_of(self, run_id: str) -> bool:
        """Whether this process knows the key id ``run_id``'s contents are sealed under: it
        submitted the run, or read a sealed value of it."""
        return run_id in self._key_of_run or run_id in self._ciphers

    def forget_run(self, run_id: str) -> None:
        """Drop what this process keeps for ``run_id`` (a worker's run that has ended): its key id
        and the ciphers of its own key. A subject's ciphers stay, as other runs share them; the
        key itself stays in the key store (a late signal or a duplicate submission of the run
        opens with it)."""
        key_id = self._key_of_run.pop(run_id, run_id)
        self._by_run.pop(run_id, None)
        if not key_id.startswith(SUBJECT_PREFIX):
            self._ciphers.pop(key_id, None)
            self._aeads.pop(key_id, None)

    def forget(self, key_id: str) -> None:
        self._aeads.pop(key_id, None)
        self._ciphers.pop(key_id, None)
        self._by_run.clear()  # rare (an erasure seen by a reader): rebuilt on the next record

    def seal(self, record: Record) -> Record:
        changes = self.sealed_fields(record)
        return dataclasses.replace(record, **changes) if changes else record

    def sealed_fields(self, record: Record) -> dict[str, Any] | None:
        """The content fields of ``record`` sealed, by name; None if it has none to seal. (A
        worker's records are sealed by the serde's compiled encoders as they are written, the same
        way; this is for the records those do not write.)"""
        fields = CONTENT_FIELDS.get(record.type)
        if fields is None:
            return None
        changes: dict[str, Any] = {}
        cipher: Cipher | None = None  # looked up once, at the first value that needs it
        for name in fields:
            value = getattr(record, name)
            if isinstance(value, list):  # a prompt's messages, each sealed on its own
                if not value:
                    continue
                items = []
                for item in value:
                    if self.needs_sealing(item, name):
                        cipher = cipher or self.cipher_of_run(record.run_id)
                        items.append(cipher.seal(item, name))
                    else:
                        items.append(item)
                changes[name] = items
            elif isinstance(value, str) and self.needs_sealing(value, name):
                cipher = cipher or self.cipher_of_run(record.run_id)
                changes[name] = cipher.seal(value, name)
        return changes or None

    def needs_sealing(self, value: str, field: str) -> bool:
        """Whether ``value`` of ``field`` is written sealed: it holds text, and is not a sealed
        value to be kept as it is (``opens``)."""
        return bool(value) and not (value.startswith(PREFIX) and self.opens(value, field))

    def seal_text(self, value: str, field: str, run_id: str) -> str:
        """``value`` of ``field`` sealed under the key of ``run_id`` (created if it has none)."""
        if not value or (is_sealed(value) and self.opens(value, field)):
            return value
        return self._cipher_for(run_id).seal(value, field)

    def opens(self, value: str, field: str) -> bool:
        """Whether ``value`` may be written as it is: a sealed value of ``field`` (a copy a fork or a
        reset carries over from another run, or what a rejection keeps of a submission it could not
        open). It is sealed again only when its named key is held here and does not open it as
        ``field`` (a user's text that begins with the prefix and names a key in use), or when it is
        not a sealed value's shape at all. A value naming a key this process has not read is kept
        as it is: looking the key up would read Kafka on the worker's event loop, and making one
        would put a second key under a submission's id (docs/erasure.md, Limits)."""
        try:
            key_id = key_id_of(value)
            raw = base64.b64decode(value[value.rindex(":") + 1 :], validate=True)
        except ValueError:  # binascii.Error among them: not base64
            return False
        aead = self._aeads.get(key_id)
        if aead is None:
            key = self.keys.held(key_id)
            if key is None:
                return True
            aead = self._aeads[key_id] = AESGCM(key)
            _bound(self._aeads)
        try:
            aead.decrypt(raw[:12], raw[12:], f"{key_id}/{field}".encode())
        except (InvalidTag, ValueError):
            return False
        return True

    def _cipher_for(self, run_id: str) -> Cipher:
        key_id = self._key_of_run.get(run_id, run_id)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            cipher = self._ciphers[key_id] = Cipher(key_id, self.keys.sealing_key(key_id))
            _bound(self._ciphers)
        return cipher

    def cipher_of_run(self, run_id: str) -> Cipher:
        """The cipher that seals ``run_id``'s contents: ``_cipher_for``, kept for the run's next
        records (one lookup a record, the key id resolved once a run)."""
        cipher = self._by_run.get(run_id)
        if cipher is None:
            cipher = self._by_run[run_id] = self._cipher_for(run_id)
            _bound(self._by_run)
        return cipher

    def open(self, record: Record) -> Record:
        fields = CONTENT_FIELDS.get(record.type)
        if fields is None:
            return record
        changes: dict[str, Any] = {}
        for name in fields:
            value = getattr(record, name)
            if isinstance(value, list):
                if any(is_sealed(item) for item in value):
                    changes[name] = [self.open_text(item, name, record.run_id) for item in value]
            elif value and is_sealed(value):
                changes[name] = self.open_text(
                    value, name, record.run_id, patient=record.type == "RunSubmitted"
                )
        return dataclasses.replace(record, **changes) if changes else record

    def open_text(self, value: str, field: str, run_id: str = "", *, patient: bool = False) -> str:
        """The plain text of a sealed ``value`` of ``field``; ERASED if its key was destroyed, the
        text itself if it is not sealed."""
        if not is_sealed(value):
            return value
        key_id = key_id_of(value)
        if run_id and run_id not in self._key_of_run:
            self._key_of_run[run_id] = key_id
            self._by_run.pop(run_id, None)  # a cipher chosen before the run's key id was known
        aead = self._aeads.get(key_id)
        if aead is None:
            if patient and not self.wait_for_keys:
                # a submission whose key may be a moment behind it, read where nothing may wait
                key = self.keys.held(key_id)
                if key is None:
                    raise KeyPending(key_id, run_id)
            else:
                key = self.keys.opening_key(key_id)
                if key is None and patient:  # a submission whose key may be a moment behind it
                    key = self.keys.opening_key(key_id, wait=KEY_ARRIVAL_TIMEOUT)
            if key is None:
                return ERASED
            aead = self._aeads[key_id] = AESGCM(key)
            _bound(self._aeads)
        raw = base64.b64decode(value[value.rindex(":") + 1 :])
        try:
            return aead.decrypt(raw[:12], raw[12:], f"{key_id}/{field}".encode()).decode()
        except InvalidTag as error:
            raise SealError(
                f"the sealed {field} of run {run_id or '?'} does not open with key {key_id!r}: altered, "
                "or sealed under another key"
            ) from error
