"""Crypto-shredding: run contents sealed under a data key kept apart, so erasing means losing a key.

Kafka's topics are immutable and kept forever; a person's messages cannot be cut out of them. So
the *contents* of a run -- its input, call arguments (model-call messages among them), call
results, its result, signal payloads -- are written sealed: AES-GCM under a 256-bit data key of
the run (or of a data subject), as a string ``sealed:v1:<key id>:<base64 nonce + ciphertext>``.
Everything else stays in the clear -- record types, ids, sequence numbers, hashes, token counts,
costs, timings -- so the structure of an erased run remains auditable.

The keys live in a compacted topic of their own (``Settings.keys_topic``), keyed by key id (the
run id, or ``subject/<id>``) in the partition a run of that id has. ``agentlog erase`` appends a
tombstone; once compaction has run, the key is gone from the disks, and every sealed field that
named it reads as :data:`ERASED` -- in a worker, a client, the sink's readers and the UI alike.

The key id inside each sealed value (not the record's run id) says which key opens it: a fork or a
reset that copies another run's records keeps them readable, and a run sealed under its subject's
key needs no schema field to say so.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import os
import threading
import time
from binascii import b2a_base64
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog, Tail
from runtime.log.records.events import Record

PREFIX = "sealed:v1:"
# What an erased field reads as: JSON text (the fields hold JSON), so a reader that parses it gets
# the string "erased" rather than a decode error.
ERASED = '"erased"'
SUBJECT_PREFIX = "subject/"
KEY_ACK_TIMEOUT = 30.0
# How long a worker waits for the key of a submission it was handed: a client writes the key just
# before the command without waiting for its ack (a submission is not held up by a round trip),
# so the command may be readable a moment before its key. A worker waits off its event loop
# (``KeyStore.fetch``), holding the partition's commands behind that one (runtime.worker.commands);
# a key still missing then rejects the submission.
KEY_ARRIVAL_TIMEOUT = 10.0
# How often a waited-for key's partition is read to its end while the follower (``KeyStore.follow``)
# has not brought it: the follower normally does, the read is the fallback.
FOLLOWED_KEY_WAIT = 0.5
# Outside the followed partitions a waited-for key is read again after 10 ms, then less and less
# often, up to this: a missing key costs a handful of reads a second, not a hundred.
_REREAD_MAX_S = 0.5
# Threads that wait for keys (``KeyStore.fetch``): one per submission waiting at once, so one key
# that never arrives does not hold up another partition's.
_FETCH_THREADS = 8

# The ciphers (sealing and opening) a process keeps, one per key: a cache, rebuilt from the cached
# key on its next use, so a client that submits millions of runs does not keep one per run. (A
# worker drops a run's own as the run ends: ``Sealer.forget_run``.)
CACHED_CIPHERS = 4096

# How often the follower looks whether it is being closed: a client's close waits for it.
_FOLLOW_POLL_S = 0.1

# The fields of each record type that hold a run's contents. Errors, names, hashes and usage stay clear.
CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "RunSubmitted": ("input", "seed"),  # seed: the records a reset or fork copies, as JSON
    "RunStarted": ("input",),
    "RunContinuedAsNew": ("input",),
    "RunRejected": ("raw",),
    "RunCompleted": ("result",),
    "ModelCallScheduled": ("args", "new_messages", "params"),
    "ModelCallCompleted": ("result",),
    "ToolCallScheduled": ("args",),
    "ToolCallCompleted": ("result",),
    "SignalSent": ("payload",),
    "SignalReceived": ("payload",),
}


# Every field a value is sealed as: the records' content fields, and the payloads topic's values.
SEALED_AS: tuple[str, ...] = (
    *dict.fromkeys(n for names in CONTENT_FIELDS.values() for n in names),
    "payload",
)


class SealError(AgentlogError):
    """A sealed value that its key does not open: altered, or sealed under another key."""


class KeyPending(AgentlogError):
    """A submission names a key this process has not cached, and its reader asked not to wait for
    it on its own thread (``Sealer.wait_for_keys`` False: a worker's event loop). The reader fetches
    it elsewhere (``KeyStore.fetch``) and decodes the record again once it has arrived."""

    def __init__(self, key_id: str, run_id: str) -> None:
        super().__init__(f"the data key {key_id!r} of run {run_id or '?'} is not cached yet")
        self.key_id = key_id
        self.run_id = run_id


def subject_key_id(subject: str) -> str:
    if not subject:
        raise ValueError("a data subject must be a non-empty string")
    return SUBJECT_PREFIX + subject


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX)


def key_id_of(value: str) -> str:
    """The key id a sealed value names."""
    return value[len(PREFIX) : value.rindex(":")]


class KeyStore:
    """The data keys of the keys topic, read on demand per partition and cached.

    A miss reads the key's partition from where this store last stopped to its end (one range
    read); keys are written before any record sealed under them, so a key a record names is found.

    A worker also *follows* the keys partitions it owns (``follow``): one background reader keeps
    their new keys cached as they are written, so a new run's key is found without a read of
    its own -- two offset queries and a fetch on the event loop per run, otherwise.
    """

    def __init__(self, log: EventLog, topic: str, partitions: int) -> None:
        self.log, self.topic, self.partitions = log, topic, partitions
        self._keys: dict[str, bytes | None] = {}  # key id -> key; None: a tombstone was read
        self._read_to: dict[int, int] = {}  # partition -> the next offset to read
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified when the follower caches keys
        self._followed: set[int] = set()
        self._tail: Tail | None = None
        self._follower: threading.Thread | None = None
        self._closing = False
        self._fetcher: ThreadPoolExecutor | None = None  # ``fetch``'s threads, made on first use
        # False (a client): a new key is appended without waiting for its ack, which ``settle``
        # (the client's flush) waits for; the command after it goes through the same producer.
        self.ack_each = True
        self._pending: list[Future[int]] = []
        # True (a client): a partition read for a key twice is followed from then on (``follow``), so
        # the next submission with an id of its own finds its partition's keys without a round trip
        # -- one per submission otherwise, which spaces a burst of submissions out. Not at the first
        # read: a client that submits once (the CLI) would wait for the follower at its close.
        self.follow_reads = False
        self._reads: dict[int, int] = {}  # partition -> range reads ``get_or_create`` made of it

    def partition(self, key_id: str) -> int:
        return partition_for(key_id, self.partitions)

    @property
    def closing(self) -> bool:
        """``close`` has been called: a wait it cut short answered None, not "no such key"."""
        return self._closing

    def get(self, key_id: str) -> bytes | None:
        """The key, or None if it was never written or has been destroyed."""
        with self._lock:
            if key_id not in self._keys:
                self._catch_up(self.partition(key_id))
                # Keys are written before anything sealed under them: one not found now never was, or
                # its tombstone has been compacted away -- either way it opens nothing, so do not ask again.
                self._keys.setdefault(key_id, None)
            return self._keys[key_id]

    def get_or_create(self, key_id: str, *, new: bool = False) -> bytes:
        """The key; a new one, acknowledged by Kafka before it is returned, if there is none.
        ``new``: the caller has just made ``key_id`` up (a fresh random run id), so no key can
        exist under it and the partition is not read -- a round trip per submission otherwise."""
        with self._lock:
            partition = self.partition(key_id)
            if self._keys.get(key_id) is None and not new and not self._follows(partition):
                self._catch_up(partition)
                self._reads[partition] = reads = self._reads.get(partition, 0) + 1
                if self.follow_reads and reads > 1:
                    self._follow_locked([partition])
            key = self._keys.get(key_id)
            if key is None:
                key = AESGCM.generate_key(bit_length=256)
                written = self._append(partition, key_id, key)
                if self.ack_each:
                    written.result(timeout=KEY_ACK_TIMEOUT)
                else:
                    self._pending.append(written)
                self._keys[key_id] = key
            return key

    def settle(self) -> None:
        """Wait for the acks of the keys appended without waiting; raises the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
        for written in pending:
            written.result(timeout=KEY_ACK_TIMEOUT)

    def cached(self, key_id: str) -> bytes | None:
        """The key if this store holds it, without any read: None if it has not been read yet (or
        a tombstone was). A worker's event loop asks this; ``fetch`` does the waiting. (No lock: a
        dict lookup is atomic, and a range read holding the lock must not stall the loop.)"""
        return self._keys.get(key_id)

    def fetch(self, key_id: str, timeout: float = KEY_ARRIVAL_TIMEOUT) -> Future[bytes | None]:
        """``awaited`` in a thread of this store, for a caller that must not wait itself (a worker's
        event loop): the future has the key, or None if it did not arrive within ``timeout``."""
        with self._lock:
            if self._closing:
                closed: Future[bytes | None] = Future()
                closed.set_result(None)
                return closed
            if self._fetcher is None:
                self._fetcher = ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="agentlog-key-fetch")
            return self._fetcher.submit(self.awaited, key_id, timeout)

    def awaited(self, key_id: str, timeout: float = KEY_ARRIVAL_TIMEOUT) -> bytes | None:
        """The key, read again until it arrives or ``timeout`` passes (a submission's key, written
        just before it); None if it never does. Blocks the calling thread: a worker's event loop
        calls ``fetch`` instead. In a followed partition the follower brings it (the partition is
        read to its end every ``FOLLOWED_KEY_WAIT`` meanwhile, in case the follower lags); elsewhere
        the partition is read again, less and less often."""
        deadline = time.monotonic() + timeout
        partition = self.partition(key_id)
        pause = 0.01
        while True:
            with self._arrived:
                # Only a followed partition's cache is kept fresh (a tombstone too): elsewhere the key
                # is read again, as a caller refreshing a key it holds (analytics.unseal) expects.
                if self._follows(partition):
                    self._arrived.wait_for(
                        lambda: self._keys.get(key_id) is not None or self._closing,
                        timeout=max(0.0, min(FOLLOWED_KEY_WAIT, deadline - time.monotonic())),
                    )
                    key = self._keys.get(key_id)
                    if key is not None:
                        return key
                self._catch_up(partition)
                key = self._keys.get(key_id)
            if key is not None or self._closing or time.monotonic() >= deadline:
                return key
            if partition not in self._followed:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, _REREAD_MAX_S)

    def destroy(self, key_id: str) -> None:
        """Append the key's tombstone and wait for its ack; this store forgets the key at once."""
        with self._lock:
            self._append(self.partition(key_id), key_id, None).result(timeout=KEY_ACK_TIMEOUT)
            self._keys[key_id] = None

    def follow(self, partitions: Iterable[int]) -> None:
        """Keep the keys of ``partitions`` cached as they are written, from where this store has
        read them (a worker's owned partitions, after their takeover). A partition stays followed
        once it is: its keys are few and small, and a partition given back may come back."""
        with self._lock:
            self._follow_locked(partitions)

    def _follows(self, partition: int) -> bool:
        """Whether the follower keeps ``partition``'s keys cached: a key not cached was not
        written -- or was written in the moment the follower takes to read it, as two clients
        making a key for one id at once (each reads the partition before it writes) may both."""
        return partition in self._followed and self._follower is not None

    def _follow_locked(self, partitions: Iterable[int]) -> None:
        new = [p for p in partitions if p not in self._followed]
        if not new or self._closing:
            return
        if self._tail is None:
            self._tail = self.log.tail(self.topic)
        for partition in new:
            start = self._read_to.get(partition)
            if start is None:
                start = self.log.watermarks(self.topic, partition)[0]
            self._followed.add(partition)
            self._tail.follow(partition, start)
        if self._follower is None:
            self._follower = threading.Thread(target=self._follow, name="agentlog-keys", daemon=True)
            self._follower.start()

    def stop_following(self) -> None:
        """Stop the follower, and forget which partitions it followed (a client's close): the keys
        read stay cached, lookups read again, and a partition read twice is followed again."""
        with self._lock:
            follower, self._follower = self._follower, None
            tail, self._tail = self._tail, None
            self._followed.clear()
            self._reads.clear()
        if follower is not None:
            follower.join(timeout=5)
        if tail is not None:
            tail.close()

    def close(self) -> None:
        """Stop following (``follow``) and fetching (``fetch``: a wait under way ends with None);
        the keys read stay cached."""
        with self._lock:
            self._closing = True
            fetcher, self._fetcher = self._fetcher, None
            self._arrived.notify_all()
        if fetcher is not None:
            fetcher.shutdown(wait=False, cancel_futures=True)
        self.stop_following()

    def _follow(self) -> None:
        tail = self._tail
        assert tail is not None
        while not self._closing and self._tail is tail:  # until closed, or stopped (stop_following)
            records = tail.poll(_FOLLOW_POLL_S)
            if not records:
                continue
            with self._arrived:
                for partition, record in records:
                    # A range read (``_catch_up``) may have passed this offset already: what it
                    # read is newer, and a key's tombstone must not be undone by the key.
                    if record.offset >= self._read_to.get(partition, 0):
                        if record.key is not None:
                            self._keys[record.key.decode()] = record.value
                        self._read_to[partition] = record.offset + 1
                self._arrived.notify_all()

    def _append(self, partition: int, key_id: str, value: bytes | None) -> Future[int]:
        return self.log.append(self.topic, partition, key_id.encode(), value)

    def _catch_up(self, partition: int) -> None:
        low, high = self.log.watermarks(self.topic, partition)
        start = max(self._read_to.get(partition, low), low)
        if start < high:
            for record in self.log.read(self.topic, partition, start, high):
                if record.key is not None:
                    self._keys[record.key.decode()] = record.value
        self._read_to[partition] = max(start, high)


def _bound(cache: dict[str, Any]) -> None:
    """Drop ``cache``'s oldest entries past ``CACHED_CIPHERS`` (called where one is added)."""
    while len(cache) > CACHED_CIPHERS:
        del cache[next(iter(cache))]


class _Cipher:
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


class Sealer:
    """Seals the content fields of records before they are encoded, and opens them after decoding."""

    # False (a worker): a submission whose key is not cached raises KeyPending rather than waiting
    # for the key on the decoding thread -- the worker's event loop, which every other run of the
    # worker needs (runtime.worker.commands holds the command and fetches the key).
    wait_for_keys: bool = True

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._aeads: dict[str, AESGCM] = {}  # key id -> the cipher that opens
        self._ciphers: dict[str, _Cipher] = {}  # key id -> the cipher that seals, with its nonces
        # run id -> the key id its contents are sealed under, learnt from what was submitted or read
        self._key_of_run: dict[str, str] = {}
        # run id -> its sealing cipher: one lookup a record (the key id resolved once a run)
        self._by_run: dict[str, _Cipher] = {}

    def use_subject(self, run_id: str, subject: str) -> None:
        """Seal ``run_id``'s contents under ``subject``'s key (``Client.submit(..., subject=)``)."""
        self._key_of_run[run_id] = subject_key_id(subject)
        self._by_run.pop(run_id, None)

    def use_new_key(self, run_id: str) -> None:
        """Seal ``run_id``'s contents under a key of its own made now, without looking for one:
        the caller has just drawn ``run_id`` at random (``Client.submit`` without an id)."""
        if run_id not in self._key_of_run and run_id not in self._ciphers:
            self._ciphers[run_id] = _Cipher(run_id, self.keys.get_or_create(run_id, new=True))
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
        cipher: _Cipher | None = None  # looked up once, at the first value that needs it
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
            key = self.keys.cached(key_id)
            if key is None:
                return True
            aead = self._aeads[key_id] = AESGCM(key)
            _bound(self._aeads)
        try:
            aead.decrypt(raw[:12], raw[12:], f"{key_id}/{field}".encode())
        except (InvalidTag, ValueError):
            return False
        return True

    def _cipher_for(self, run_id: str) -> _Cipher:
        key_id = self._key_of_run.get(run_id, run_id)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            cipher = self._ciphers[key_id] = _Cipher(key_id, self.keys.get_or_create(key_id))
            _bound(self._ciphers)
        return cipher

    def cipher_of_run(self, run_id: str) -> _Cipher:
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
                key = self.keys.cached(key_id)
                if key is None:
                    raise KeyPending(key_id, run_id)
            else:
                key = self.keys.get(key_id)
                if key is None and patient:  # a submission whose key may be a moment behind it
                    key = self.keys.awaited(key_id)
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
