"""``agentlog erase``: destroy the data key of a run or of a data subject (crypto-shredding).

The log is never rewritten: the key's tombstone goes to the compacted keys topic, and from then on
every sealed content field under that key reads as ``"erased"`` (runtime.log.records.sealing),
while record types, sequence numbers, hashes, tokens and costs stay readable. A run that has not
ended refuses: its worker holds the key and would go on writing under it.
"""

from __future__ import annotations

from runtime.client import Client
from runtime.errors import AgentlogError
from runtime.log.records.sealing import Sealer, subject_key_id
from runtime.log.records.status import has_ended


class ErasureRefused(AgentlogError):
    """The erasure asked for cannot be done now; the message says why."""


def _sealer(client: Client) -> Sealer:
    sealer = client.serde.sealer
    if sealer is None:
        raise ErasureRefused(
            "this deployment does not seal run contents (AGENTLOG_SEAL_CONTENTS is false): there is no key "
            "to destroy, and erasing would need rewriting the log"
        )
    return sealer


def erase_run(client: Client, run_id: str) -> str:
    """Destroy the key ``run_id``'s contents are sealed under; returns its key id. Refuses a run
    that is unknown or has not ended, naming it and its status."""
    sealer = _sealer(client)
    status = client.status(run_id)
    if status.status == "unknown":
        raise ErasureRefused(f"run {run_id} is not in the log: nothing to erase")
    if not has_ended(status.status):
        raise ErasureRefused(
            f"run {run_id} is {status.status}: only a run that has ended can be erased "
            "(cancel it first: `agentlog cancel`)"
        )
    # The key id the run's own records name (its subject's, if it was submitted with one).
    key_id = sealer.key_id_for(run_id)
    sealer.keys.destroy(key_id)
    sealer.forget(key_id)
    return key_id


def erase_subject(client: Client, subject: str) -> str:
    """Destroy ``subject``'s key: the contents of every run submitted with it read as erased."""
    sealer = _sealer(client)
    key_id = subject_key_id(subject)
    sealer.keys.destroy(key_id)
    sealer.forget(key_id)
    return key_id
