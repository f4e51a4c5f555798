"""``agentlog audit verify RUN``: recompute a run's hash chain (runtime.log.records.chain) and name
the first record that does not follow from the ones before it.

From Kafka the chain is checked over the records' bytes as the log holds them, fenced (zombie)
records left out as every reader leaves them out. From the store (``--from-store``) each row is
first turned back into the bytes it was decoded from -- the writer schema of its ``schema_id``
encodes the row's columns, and Avro has one encoding per value -- so a column altered in
ClickHouse no longer matches the link the worker sealed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from runtime.client import Client
from runtime.errors import TerminalError
from runtime.log.records.chain import Chain
from runtime.log.records.events import Event
from runtime.log.records.fencing import FenceFilter
from runtime.log.schemas.datum import DecodeError


class ChainKeyMissing(TerminalError):
    """``audit verify`` was asked without the workers' chain key."""

    def __init__(self) -> None:
        super().__init__(
            "agentlog audit verify needs the workers' chain key: set AGENTLOG_CHAIN_KEY "
            "(the key the workers seal the runs' records with)"
        )


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

    @property
    def ok(self) -> bool:
        return self.broken_at is None and self.records > 0

    def describe(self) -> str:
        if self.records == 0:
            return f"run {self.run_id}: no records found"
        if self.broken_at is None:
            return f"run {self.run_id}: {self.records} records, chain verified"
        at = self.broken_at
        return (
            f"run {self.run_id}: first bad record {at.where} (seq {at.seq}, {at.type}): {self.kind} -- {self.detail}"
        )


def verify_entries(key: bytes, run_id: str, entries: Iterable[Entry]) -> Verdict:
    """The first of ``entries`` (the run's records in log order) that breaks its chain."""
    chain = Chain(key, run_id)
    count = 0
    last_seq = 0
    for entry in entries:
        count += 1
        if entry.value is None:
            return Verdict(run_id, count, entry, "unreadable", entry.problem)
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


def chain_key_of(client: Client) -> bytes:
    key = client.settings.chain_key.get_secret_value().encode()
    if not key:
        raise ChainKeyMissing()
    return key


def log_entries(client: Client, run_id: str) -> Iterator[Entry]:
    """The run's records in the events topic, bytes as written, fenced records left out."""
    settings = client.settings
    partition = client.partition(run_id)
    key = run_id.encode()
    fence = FenceFilter()
    topic = settings.events_topic
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
        if not isinstance(event, Event) or not fence.admit(event, record.offset) or event.run_id != run_id:
            continue
        yield Entry(where, record.value, event.seq, event.type)


def verify_log(client: Client, run_id: str) -> Verdict:
    return verify_entries(chain_key_of(client), run_id, log_entries(client, run_id))
