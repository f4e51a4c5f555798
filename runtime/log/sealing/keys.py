"""The data keys of sealed runs, kept in a compacted topic of their own, read on demand and cached.

The keys live in ``Settings.keys_topic``, keyed by key id (the run id, or ``subject/<id>``) in the
partition a run of that id has. ``agentlog erase`` appends a tombstone (``KeyStore.destroy``); once
compaction has run, the key is gone from the disks, and every sealed field that named it reads as
``ERASED`` -- in a worker, a client, the sink's readers and the UI alike.

One way to get a key for each purpose:

- ``new_key``: the key of a run whose id was drawn just now -- made and written, nothing read;
- ``sealing_key``: the key that seals an id's contents (a given run id, a data subject) -- the one
  written, else a new one;
- ``opening_key``: the key that opens a sealed value, read if it is not held -- optionally read
  again until it arrives (a submission's key, written just before it); ``opening_key_later`` is the
  same in a thread of this store, for a caller that must not wait (a worker's event loop), and
  ``held`` what that caller may ask without any read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog, Tail

KEY_ACK_TIMEOUT = 30.0
# How long a worker waits for the key of a submission it was handed: a client writes the key just
# before the command without waiting for its ack (a submission is not held up by a round trip),
# so the command may be readable a moment before its key. A worker waits off its event loop
# (``KeyStore.opening_key_later``), holding the partition's commands behind that one
# (runtime.worker.commands); a key still missing then rejects the submission.
KEY_ARRIVAL_TIMEOUT = 10.0
# How often a waited-for key's partition is read to its end while the follower (``KeyStore.follow``)
# has not brought it: the follower normally does, the read is the fallback.
FOLLOWED_KEY_WAIT = 0.5
# Outside the followed partitions a waited-for key is read again after 10 ms, then less and less
# often, up to this: a missing key costs a handful of reads a second, not a hundred.
_REREAD_MAX_S = 0.5
# Threads that wait for keys (``KeyStore.opening_key_later``): one per submission waiting at once,
# so one key that never arrives does not hold up another partition's.
_FETCH_THREADS = 8

# How often the follower looks whether it is being closed: a client's close waits for it.
_FOLLOW_POLL_S = 0.1


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
        self._fetcher: ThreadPoolExecutor | None = None  # ``opening_key_later``'s threads, made on first use
        # False for a submitter (``serve_submitter``): see there.
        self._ack_each = True
        self._pending: list[Future[int]] = []
        self._follow_reads = False
        self._reads: dict[int, int] = {}  # partition -> range reads ``sealing_key`` made of it

    def serve_submitter(self, *, follow_reads: bool) -> None:
        """Make this store a client's (runtime.log.sealing.submitter): a new key is appended
        without waiting for its ack, which ``settle`` (the client's flush) waits for; the command
        after it goes through the same producer. ``follow_reads``: a partition read for a key
        twice is followed from then on (``follow``), so the next submission with an id of its own
        finds its partition's keys without a round trip -- one per submission otherwise, which
        spaces a burst of submissions out. Not at the first read: a client that submits once (the
        CLI) would wait for the follower at its close."""
        with self._lock:
            self._ack_each = False
            self._follow_reads = follow_reads

    def partition(self, key_id: str) -> int:
        return partition_for(key_id, self.partitions)

    @property
    def closing(self) -> bool:
        """``close`` has been called: a wait it cut short answered None, not "no such key"."""
        return self._closing

    # -- keys to seal with ------------------------------------------------------------------------
    def new_key(self, key_id: str) -> bytes:
        """A new key for ``key_id``, which the caller has just made up (a fresh random run id), so
        no key can exist under it and the partition is not read -- a round trip per submission
        otherwise. Acknowledged by Kafka before it is returned, unless this store serves a
        submitter (``serve_submitter``)."""
        with self._lock:
            key = self._keys.get(key_id)
            return key if key is not None else self._create(key_id)

    def sealing_key(self, key_id: str) -> bytes:
        """The key that seals ``key_id``'s contents (a given run id, a data subject's key id): the
        one written, read if it is not held; else a new one, as ``new_key`` writes it."""
        with self._lock:
            partition = self.partition(key_id)
            if self._keys.get(key_id) is None and not self._follows(partition):
                self._catch_up(partition)
                self._reads[partition] = reads = self._reads.get(partition, 0) + 1
                if self._follow_reads and reads > 1:
                    self._follow_locked([partition])
            key = self._keys.get(key_id)
            return key if key is not None else self._create(key_id)

    def _create(self, key_id: str) -> bytes:
        key = AESGCM.generate_key(bit_length=256)
        written = self._append(self.partition(key_id), key_id, key)
        if self._ack_each:
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

    # -- keys to open with ------------------------------------------------------------------------
    def opening_key(self, key_id: str, *, wait: float | None = None) -> bytes | None:
        """The key that opens values sealed under ``key_id``; None if it was never written or has
        been destroyed. Blocks the calling thread.

        ``wait`` None: the key held, or else its partition read once from where this store
        stopped (keys are written before anything sealed under them: one not found now never was,
        or its tombstone has been compacted away -- either way it opens nothing, so it is not asked
        for again). ``wait`` seconds: the partition read again until the key arrives or ``wait``
        passes (a submission's key, written just before it; 0: once more now, so a tombstone
        appended since is seen). In a followed partition the follower brings it (the partition is
        read to its end every ``FOLLOWED_KEY_WAIT`` meanwhile, in case the follower lags);
        elsewhere the partition is read again, less and less often."""
        if wait is None:
            with self._lock:
                if key_id not in self._keys:
                    self._catch_up(self.partition(key_id))
                    self._keys.setdefault(key_id, None)
                return self._keys[key_id]
        deadline = time.monotonic() + wait
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

    def opening_key_later(self, key_id: str, wait: float = KEY_ARRIVAL_TIMEOUT) -> Future[bytes | None]:
        """``opening_key(key_id, wait=wait)`` in a thread of this store, for a caller that must not
        wait itself (a worker's event loop): the future has the key, or None if it did not arrive
        within ``wait`` (or this store was closed meanwhile: ``closing``)."""
        with self._lock:
            if self._closing:
                closed: Future[bytes | None] = Future()
                closed.set_result(None)
                return closed
            if self._fetcher is None:
                self._fetcher = ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="agentlog-key-fetch")
            return self._fetcher.submit(lambda: self.opening_key(key_id, wait=wait))

    def held(self, key_id: str) -> bytes | None:
        """The key if this store holds it, without any read: None if it has not been read yet (or
        a tombstone was). What a worker's event loop may ask; ``opening_key_later`` does the
        waiting. (No lock: a dict lookup is atomic, and a range read holding the lock must not
        stall the loop.)"""
        return self._keys.get(key_id)

    # -- the topic --------------------------------------------------------------------------------
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
        """Stop following (``follow``) and fetching (``opening_key_later``: a wait under way ends
        with None); the keys read stay cached."""
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
