"""The sealing-key work of a program that writes commands (runtime.client): which key each command
it writes is sealed under, and how its key store writes and follows keys."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runtime.log.sealing.sealer import Sealer


class SubmitterKeys:
    """The keys of the submissions and signals one client writes, through ``sealer``.

    ``own_producer``: the client writes keys through a producer of its own, just before the
    command: a key is appended without waiting for its ack (``settle`` waits, at the client's
    flush), so a submission is not held up by a round trip. ``follow_reads`` (with it): the key
    store is the client's alone, and a keys partition read twice is followed from then on
    (``KeyStore.serve_submitter``): 200 submits with ids of their own took 350 ms, 36 ms so."""

    def __init__(self, sealer: Sealer, *, own_producer: bool, follow_reads: bool) -> None:
        self.sealer = sealer
        if own_producer:
            sealer.keys.serve_submitter(follow_reads=follow_reads)
        self._follows = own_producer and follow_reads

    def for_submission(self, run_id: str, *, drawn: bool, subject: str | None) -> None:
        """Choose the key ``run_id``'s submission is sealed under: ``subject``'s key if it names a
        data subject; a new key made now without reading the keys partition if the caller has
        just ``drawn`` the id at random; otherwise the id's own key, looked up first as the
        submission is encoded (a given id may be a repeated submission, whose key must be reused)."""
        if subject is not None:
            self.sealer.use_subject(run_id, subject)
        elif drawn:
            self.sealer.use_new_key(run_id)

    def learn_key_of(self, run_id: str, reads: Iterable[Callable[[], object]]) -> bool:
        """Before sealing a signal for ``run_id``: whether the key id its contents are sealed under
        is known -- because this client submitted or read the run, or after ``reads`` in turn
        (each decodes a record of the run: a sealed value names its key id in the clear, and
        decoding it teaches the sealer, ``Sealer.open_text``) until one taught it. Sealing under a
        key of the run id instead would make a second key: for a run sealed under its data
        subject's key, one that ``agentlog erase --subject`` does not destroy; for a run whose key
        is not readable yet, one that compaction would keep in place of the run's own."""
        for read in reads:
            if self.sealer.knows_key_of(run_id):
                return True
            read()
        return self.sealer.knows_key_of(run_id)

    def settle(self) -> None:
        """Wait for the acks of the keys written without waiting; raises the first failure."""
        self.sealer.keys.settle()

    def close(self) -> None:
        """Stop following the keys partitions (``follow_reads``): the keys read stay cached, and a
        partition read twice is followed again if the client is used again."""
        if self._follows:
            self.sealer.keys.stop_following()
