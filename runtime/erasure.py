"""``agentlog erase``: destroy the data key of a run or of a data subject (crypto-shredding).

The log is never rewritten: the key's tombstone goes to the compacted keys topic, and from then on
every sealed content field under that key reads as ``"erased"`` (runtime.log.sealing),
while record types, sequence numbers, hashes, tokens and costs stay readable. A run that has not
ended refuses: its worker holds the key and would go on writing under it. So does a data subject
with a run that has not ended (or a submission no worker has started yet), and a run whose key is
its subject's while another run of that subject goes on: runtime.sealed_runs finds them.
"""

from __future__ import annotations

from runtime.client import Client
from runtime.errors import AgentlogError
from runtime.log.records.sealed_form import SUBJECT_PREFIX, subject_key_id
from runtime.log.records.status import has_ended
from runtime.log.sealing.sealer import Sealer
from runtime.sealed_runs import UnendedRun, UnreadableLog, listed, unended_runs


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


def _unended(client: Client, key_id: str) -> list[UnendedRun]:
    try:
        return unended_runs(client, key_id)
    except UnreadableLog as error:
        raise ErasureRefused(f"{error}: refusing to erase rather than erase a run in progress") from error


def erase_run(client: Client, run_id: str) -> str:
    """Destroy the key ``run_id``'s contents are sealed under; returns its key id. Refuses a run
    that is unknown or has not ended, naming it and its status."""
    sealer = _sealer(client)
    status = client.run(run_id).status()
    if status.status == "unknown":
        raise ErasureRefused(f"run {run_id} is not in the log: nothing to erase")
    if not has_ended(status.status):
        raise ErasureRefused(
            f"run {run_id} is {status.status}: only a run that has ended can be erased "
            "(cancel it first: `agentlog cancel`)"
        )
    # The key id the run's own records name (its subject's, if it was submitted with one).
    key_id = sealer.key_id_for(run_id)
    if key_id != run_id:  # a subject's key: destroying it erases the subject's other runs too
        others = [r for r in _unended(client, key_id) if r.run_id != run_id]
        if others:
            raise ErasureRefused(
                f"run {run_id} is sealed under the key of data subject {key_id[len(SUBJECT_PREFIX) :]!r}, "
                f"which runs that have not ended share: {listed(others)}; erasing it erases them, so "
                "only once they have ended (`agentlog erase --subject` then erases them all)"
            )
    sealer.keys.destroy(key_id)
    sealer.forget(key_id)
    return key_id


def erase_subject(client: Client, subject: str) -> str:
    """Destroy ``subject``'s key: the contents of every run submitted with it read as erased.
    Refuses while a run sealed under it has not ended (a submission not started yet among them),
    naming them."""
    sealer = _sealer(client)
    key_id = subject_key_id(subject)
    unended = _unended(client, key_id)
    if unended:
        raise ErasureRefused(
            f"data subject {subject!r} has runs that have not ended: {listed(unended)}; only a subject "
            "whose runs have all ended can be erased (cancel them first: `agentlog cancel RUN`)"
        )
    sealer.keys.destroy(key_id)
    sealer.forget(key_id)
    return key_id
