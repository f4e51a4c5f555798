"""The sink's check of the claims it stores: a claim no worker signed fences nothing in the store.

The store computes fencing itself (consumers.store_writer): every ``EpochClaimed`` raises its
partition's watermark. With the workers' public key (``AGENTLOG_VERIFY_KEY`` on the sink) each
claim of a batch is checked as every other reader checks it (runtime.log.records.partition_signing.
ClaimCheck: unsigned, signed with another key, naming another partition, or a copy of a claim stored
before): a forged one is stored with ``fenced = 1`` -- out of every view, like a fenced zombie's
record, and told apart from those by its type (a genuine claim is never fenced) -- and raises no
watermark, so the genuine rows after it are not fenced.

Claims are rare (one per takeover), so this costs nothing per step: batches without a claim never
query it. The signatures of the claims already stored are read back on start, so a copy of one
is still a copy after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable

from clickhouse_connect.driver.client import Client
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from analytics.tables import CLAIM_TYPE, EVENTS
from runtime.log.records.events import EpochClaimed
from runtime.log.records.partition_signing import ClaimCheck
from runtime.log.records.signing import verify_key_of

Position = tuple[int, int]  # (partition, offset)

# The fields a claim's signature covers (runtime.log.records.partition_signing._claim_message), as
# the store holds them; occurred_at is DateTime64(3), so milliseconds come back exactly.
_CLAIM_FIELDS = "partition, offset, record_partition, previous_epoch, toUnixTimestamp64Milli(occurred_at), worker, signature"


def store_claims(verify_key: str) -> StoreClaims | None:
    """The sink's check of claims with the ``verify_key`` setting; None without one (every claim fences)."""
    key = verify_key_of(verify_key)
    return None if key is None else StoreClaims(key)


class StoreClaims:
    """The signatures of the genuine claims stored per partition, and the check of new ones."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key
        self.seen: dict[int, set[bytes]] = {}

    def load(self, client: Client, topic: str) -> None:
        """Note the signatures of the genuine claims the store already holds for ``topic``."""
        rows = client.query(
            f"SELECT partition, signature FROM {EVENTS} WHERE topic = {{topic:String}} "
            f"AND type = '{CLAIM_TYPE}' AND fenced = 0 AND signature != ''",
            parameters={"topic": topic},
            column_formats={"signature": "bytes"},
        ).result_rows
        self.seen = {}
        for partition, signature in rows:
            self.seen.setdefault(int(partition), set()).add(bytes(signature))

    def check(self, client: Client, staged_rows: str) -> tuple[set[Position], dict[int, set[bytes]]]:
        """The forged claims among ``staged_rows`` (SQL of the batch's rows), and the signatures
        of its genuine ones -- to :meth:`note` once the batch is stored, so that a retried batch
        does not take its own claims for copies."""
        rows = client.query(
            f"SELECT {_CLAIM_FIELDS} FROM {staged_rows} "
            f"WHERE type = '{CLAIM_TYPE}' AND decode_error = '' ORDER BY partition, offset",
            column_formats={"signature": "bytes"},
        ).result_rows
        checks: dict[int, ClaimCheck] = {}
        forged: set[Position] = set()
        for partition, offset, named, previous, occurred_at, worker, signature in rows:
            p = int(partition)
            check = checks.get(p)
            if check is None:
                check = checks[p] = ClaimCheck(self.key, p)
                check.seen = set(self.seen.get(p, ()))
            claim = EpochClaimed(
                run_id="",
                partition=-1 if named is None else int(named),
                previous_epoch=-1 if previous is None else int(previous),
                occurred_at=int(occurred_at),
                worker=str(worker),
                signature=bytes(signature or b""),
            )
            if check.forged(claim) is not None:
                forged.add((p, int(offset)))
        return forged, {p: c.seen for p, c in checks.items()}

    def note(self, seen: dict[int, set[bytes]]) -> None:
        """Keep the signatures :meth:`check` returned, the batch being stored."""
        for partition, signatures in seen.items():
            self.seen.setdefault(partition, set()).update(signatures)


def positions_sql(positions: Iterable[Position]) -> str:
    """SQL true for the rows at ``positions`` (integers only, so rendering is safe)."""
    items = ", ".join(f"({int(p)}, {int(o)})" for p, o in sorted(positions))
    return f"((partition, offset) IN ({items}))" if items else "0"
