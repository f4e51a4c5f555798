"""``agentlog audit verify RUN``: recompute a run's hash chain (runtime.log.records.chain) and name
the first record that does not follow from the ones before it.

From Kafka the chain is checked over the records' bytes as the log holds them, fenced (zombie)
records left out as every reader leaves them out. From the store (``--from-store``) each row is
first turned back into the bytes it was decoded from -- the writer schema of its ``schema_id``
encodes the row's columns, and Avro has one encoding per value -- so a column altered in
ClickHouse no longer matches the link the worker sealed.

With the workers' public key (``verify_key``) the run's status-bearing records are checked against
their signatures too (runtime.log.records.signing) -- all an auditor without the chain key can
check, and it needs nothing that can write: ``audit verify`` reads with the sink's read-only role
(its start check asks for the sink's permissions, not a submitter's) and no ``Client``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from runtime.config import Settings
from runtime.errors import TerminalError
from runtime.log.kafka.access import check_access
from runtime.log.kafka.backend import KafkaLog
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog
from runtime.log.records.chain import Chain, ChainKey
from runtime.log.records.events import Event, RunRejected, RunStarted
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import claim_check
from runtime.log.records.signing import SIGNED_TYPES, Vouching, verify_key_of
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde

from .audit import run_events
from .row_bytes import reencoded
from .store import QueryStore
from .tables import EVENTS


class ChainKeyMissing(TerminalError):
    """``audit verify`` was asked without the workers' chain key."""

    def __init__(self) -> None:
        super().__init__(
            "agentlog audit verify needs the workers' chain key or their public key: set AGENTLOG_CHAIN_KEY "
            "(the key the workers seal the runs' records with: every record is checked) or AGENTLOG_VERIFY_KEY "
            "(the workers' public signing key: the records that set a run's status are checked)"
        )


@dataclass
class Reader:
    """What a verification reads through: the deployment's settings, its log and serde (a ``Client``
    has the same three)."""

    settings: Settings
    log: EventLog
    serde: Serde

    def close(self) -> None:
        self.log.close()


def read_only(settings: Settings) -> Reader:
    """A reader of the events topic with the sink's permissions (read only), checked at start."""
    check_access(settings, "sink")
    return Reader(settings, KafkaLog(settings), Serde(settings))


@dataclass(frozen=True)
class Entry:
    """One of the run's records as the verifier sees it."""

    where: str  # e.g. "agentlog.events[3]@42"
    value: bytes | None  # None: undecodable or not re-encodable (``problem`` says why)
    seq: int
    type: str
    problem: str = ""


@dataclass(frozen=True)
class Verdict:
    run_id: str
    records: int
    broken_at: Entry | None
    kind: str = ""
    detail: str = ""
    checked: str = "chain verified"  # what was verified, when nothing broke

    @property
    def ok(self) -> bool:
        return self.broken_at is None and self.records > 0

    def describe(self) -> str:
        if self.records == 0:
            return f"run {self.run_id}: no records found"
        if self.broken_at is None:
            return f"run {self.run_id}: {self.records} records, {self.checked}"
        at = self.broken_at
        return f"run {self.run_id}: first bad record {at.where} (seq {at.seq}, {at.type}): {self.kind} -- {self.detail}"


FORGED = "forged claim: "  # an Entry's problem: a claim no worker signed, among the run's records


def _unreadable(run_id: str, count: int, entry: Entry) -> Verdict:
    """The verdict on an entry without a value: undecodable, or a forged claim (partition_signing)."""
    if entry.problem.startswith(FORGED):
        return Verdict(run_id, count, entry, "forged", f"{entry.problem[len(FORGED) :]}; it fences nothing")
    return Verdict(run_id, count, entry, "unreadable", entry.problem)


def verify_entries(key: ChainKey, run_id: str, entries: Iterable[Entry]) -> Verdict:
    """The first of ``entries`` (the run's records in log order) that breaks its chain."""
    chain = Chain(key, run_id)
    count = 0
    last_seq = 0
    for entry in entries:
        count += 1
        if entry.value is None:
            return _unreadable(run_id, count, entry)
        found = chain.admit(entry.value)
        if found is not None:
            kind = found.kind
            if kind.startswith("added"):  # the seq it claims tells a removal from an addition
                if entry.seq > last_seq + 1:
                    kind = f"a record before it was removed (seq {last_seq + 1} is missing)"
                elif entry.seq <= last_seq:
                    kind = f"added (a second record at seq {entry.seq}) or reordered"
                else:
                    kind = "added or altered"
            return Verdict(run_id, count, entry, kind, found.detail)
        last_seq = entry.seq
    return Verdict(run_id, count, None)


def verify_signatures(reader: Reader, run_id: str, entries: Iterable[Entry]) -> Verdict:
    """The first of ``entries`` (the run's records in log order) that no worker signed although
    it sets the run's status (or follows its signed ending); with the workers' verify key."""
    key = verify_key_of(reader.settings.verify_key)
    assert key is not None
    vouching = Vouching(key, run_id)
    count = signed = 0
    for entry in entries:
        count += 1
        if entry.value is None:
            return _unreadable(run_id, count, entry)
        forged = vouching.admit(
            entry.value, entry.type, first=entry.type in (RunStarted.__name__, RunRejected.__name__)
        )
        if forged is not None:
            return Verdict(run_id, count, entry, "forged", forged)
        signed += entry.type in SIGNED_TYPES and vouching.complete
    if count and not vouching.complete:
        return Verdict(run_id, count, None, checked="no RunStarted read: signatures not checked")
    return Verdict(run_id, count, None, checked=f"{signed} status records signed by the workers")


def checks(reader: Reader) -> list[str]:
    """What ``reader``'s settings let it verify: "chain" (the chain key), "signatures" (the verify key)."""
    found = [
        *(["chain"] if reader.settings.chain_key.get_secret_value() else []),
        *(["signatures"] if reader.settings.verify_key else []),
    ]
    if not found:
        raise ChainKeyMissing()
    return found


def verify(reader: Reader, run_id: str, check: str, entries: Iterable[Entry]) -> Verdict:
    """``check`` ("chain" or "signatures") over ``entries``."""
    if check == "chain":
        return verify_entries(
            ChainKey(reader.settings.chain_key.get_secret_value().encode()), run_id, entries
        )
    return verify_signatures(reader, run_id, entries)


def log_entries(client: Reader, run_id: str) -> Iterator[Entry]:
    """The run's records in the events topic, bytes as written, fenced records left out."""
    settings = client.settings
    partition = partition_for(run_id, settings.partitions)
    key = run_id.encode()
    # With the workers' public key a claim no worker signed fences nothing; one read between two of
    # the run's records (it could have fenced the later ones) is named as the run's bad record.
    fence = FenceFilter(claims=claim_check(verify_key_of(settings.verify_key), partition))
    topic = settings.events_topic
    forged_claims: list[Entry] = []
    started = False
    for record in client.log.read(topic, partition, keep=lambda k: k == key or k is None):
        if record.value is None:
            continue
        where = f"{topic}[{partition}]@{record.offset}"
        try:
            event = client.serde.decode(record.value, record.key)
        except DecodeError as error:
            if record.key == key:
                yield Entry(where, None, -1, "?", f"cannot be decoded: {error}")
            continue
        if not isinstance(event, Event) or not fence.admit(event, record.offset):
            if fence.forged and fence.forged[-1][0] == record.offset and started:
                forged_claims.append(Entry(where, None, -1, event.type, f"{FORGED}{fence.forged[-1][1]}"))
            continue
        if event.run_id != run_id:
            continue
        started = True
        yield from forged_claims
        forged_claims.clear()
        yield Entry(where, record.value, event.seq, event.type)


def verify_log(client: Reader, run_id: str, check: str = "chain") -> Verdict:
    return verify(client, run_id, check, log_entries(client, run_id))


def _reencoded(
    serde: Serde, schema_id: int, event: dict[str, Any], link: bytes, signature: bytes = b""
) -> bytes:
    """The framed Avro value the row was decoded from (its signature and link put back in)."""
    text = serde.resolver.writer_text(schema_id)
    if text is None:
        raise DecodeError(f"schema id {schema_id} is not in the registry")
    return reencoded(text, schema_id, event, link, signature)


def store_entries(client: Reader, store: QueryStore, run_id: str) -> Iterator[Entry]:
    """The run's rows in the store, in log order (fenced rows left out), as the bytes they came from."""
    topic = client.settings.events_topic
    events = run_events(store, run_id, topic)
    links = store.query(
        f"SELECT partition, offset, schema_id, hex(ifNull(chain, '')), hex(ifNull(signature, '')) FROM {EVENTS} "
        "WHERE run_id = {run:String} AND topic = {topic:String} AND fenced = 0 ORDER BY partition, offset",
        {"run": run_id, "topic": topic},
    ).rows
    for event, (partition, offset, schema_id, link, signature) in zip(events, links, strict=True):
        where = f"store row {topic}[{partition}]@{offset}"
        if event.get("type") is None:
            yield Entry(where, None, -1, "?", f"the sink could not decode it: {event.get('decode_error')}")
            continue
        seq = int(str(event["seq"]))
        try:
            value = _reencoded(
                client.serde,
                int(str(schema_id)),
                event,
                bytes.fromhex(str(link)),
                bytes.fromhex(str(signature)),
            )
        except (ValueError, TypeError, KeyError, DecodeError) as error:
            yield Entry(where, None, seq, str(event["type"]), f"its columns do not make a record: {error}")
            continue
        yield Entry(where, value, seq, str(event["type"]))


def verify_store(client: Reader, store: QueryStore, run_id: str, check: str = "chain") -> Verdict:
    return verify(client, run_id, check, store_entries(client, store, run_id))
