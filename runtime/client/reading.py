"""Reading one run from the log: its events, where the run index locates them, its history,
prompts and status."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog
from runtime.log.records.chain import Chain, chain_key_of, link_of
from runtime.log.records.events import Event, ModelCallScheduled, RunRejected, RunStarted, RunSubmitted
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import claim_check
from runtime.log.records.payloads import PayloadMissing, inlined, read_back, read_blobs
from runtime.log.records.prompts import PromptMissing, RecordedInput, checked_args, rebuild_inputs
from runtime.log.records.run_index import RunLocation, parse_location, run_key
from runtime.log.records.signing import Vouching, verify_key_of
from runtime.log.records.status import has_ended
from runtime.log.schemas.datum import DecodeError, record_to_dict
from runtime.log.schemas.serde import Serde
from runtime.run_status import LoggedEvent, RunStatus, summarize
from runtime.workflow.canonical import canonical_json

logger = logging.getLogger("agentlog.client")


class RunReader:
    """Reads runs from the events, checkpoints and payloads topics of one deployment."""

    def __init__(self, settings: Settings, log: EventLog, serde: Serde) -> None:
        self.settings, self.log, self.serde = settings, log, serde
        # Events-topic records the reads went through, kept or skipped by key: what a lookup in
        # the run index saves (tests and benchmarks read it, as ``Client.events_records_read``).
        self.records_read = 0
        # The workers' public key (runtime.log.records.signing): with it, a status-bearing record
        # no worker signed is marked forged as it is read, and left out of the run's status.
        self.verify_key = verify_key_of(settings.verify_key)
        # The chain key, where a reader holds it (an auditor's `agentlog status`): every record of a
        # run read from its start is checked, and one that breaks the chain is marked forged too.
        self.chain_key = chain_key_of(settings.chain_key.get_secret_value())

    def partition(self, run_id: str) -> int:
        """The partition of the commands and events topics that holds the run's records."""
        return partition_for(run_id, self.settings.partitions)

    def decode_run_started(self, run_id: str) -> None:
        """Decode the run's RunStarted where the run index locates it. Read for what decoding does
        with a sealer: a sealed value names its key id in the clear, so the sealer learns which key
        the run's contents are under (a signal for the run is sealed under the same)."""
        location = self.location(run_id)
        if location is not None:
            next(self.events(run_id, start=location.first, end=location.first + 1), None)

    def decode_submission(self, run_id: str) -> None:
        """Decode the run's submission in the commands topic, for the same reason (its key may be
        a moment behind it: the decoding waits for it)."""
        key = run_id.encode()
        commands = self.log.read(
            self.settings.commands_topic, self.partition(run_id), keep=lambda k: k == key
        )
        for record in commands:
            if isinstance(self.serde.decode(record.value or b"", record.key), RunSubmitted):
                break

    def end_offset(self, partition: int) -> int:
        return self.log.watermarks(self.settings.events_topic, partition)[1]

    def events(self, run_id: str, start: int | None = None, end: int | None = None) -> Iterator[LoggedEvent]:
        """The run's events in log order with their offsets and sizes, fenced (zombie) records
        left out (``RunHandle.events``). A record this code cannot decode is left out with a
        warning: the worker parks a run with such a record, naming its offset, so the run's status
        still says what is wrong."""
        partition = self.partition(run_id)
        key = run_id.encode()
        fence = FenceFilter(claims=claim_check(self.verify_key, partition))  # forged claims fence nothing
        vouching = None if self.verify_key is None else Vouching(self.verify_key, run_id)
        chain: Chain | None = None

        def keep(k: bytes | None) -> bool:
            self.records_read += 1
            return k == key or k is None

        for record in self.log.read(self.settings.events_topic, partition, start=start, end=end, keep=keep):
            if record.value is None:
                continue
            try:
                event = self.serde.decode(record.value, record.key)
            except DecodeError as error:
                logger.warning("run %s: record at offset %s left out: %s", run_id, record.offset, error)
                continue
            assert isinstance(event, Event)
            if not fence.admit(event, record.offset) or event.run_id != run_id:
                continue
            forged = None
            if (
                chain is None
                and self.chain_key is not None
                and isinstance(event, (RunStarted, RunRejected))
                and link_of(record.value) is not None  # a run written before the key: not checked
            ):
                chain = Chain(self.chain_key, run_id)  # from the run's first record only
            if chain is not None and (broke := chain.admit(record.value)) is not None:
                forged = (
                    f"{self.settings.events_topic}[{partition}]@{record.offset} ({event.type}): {broke.kind}"
                )
                logger.warning("run %s: forged record %s", run_id, forged)
            if vouching is not None:
                why = vouching.admit(
                    record.value, event.type, first=isinstance(event, (RunStarted, RunRejected))
                )
                if why is not None and forged is None:
                    forged = (
                        f"{self.settings.events_topic}[{partition}]@{record.offset} ({event.type}): {why}"
                    )
                    logger.warning("run %s: forged record %s", run_id, forged)
            yield LoggedEvent(record.offset, len(record.value), event, forged)

    def history(self, run_id: str, *, payloads: bool = False) -> list[dict[str, Any]]:
        """As ``agentlog history --json`` (``RunHandle.history``)."""
        partition = self.partition(run_id)
        logged = self.logged(run_id, self.location(run_id))
        events = [e.event for e in logged]
        prompts: dict[int, dict[str, Any]] = {}
        if payloads:
            events = self.with_payloads(run_id, events)
            prompts = self._prompt_fields(run_id, events)
        return [
            {
                "seq": event.seq,
                "type": event.type,
                **record_to_dict(event),
                "chain": event.chain.hex(),  # the link as hex text (runtime.log.records.chain): JSON has no bytes
                **_signed(event, e.forged),
                **(prompts.get(event.position, {}) if isinstance(event, ModelCallScheduled) else {}),
                "partition": partition,
                "offset": e.offset,
            }
            for e, event in zip(logged, events, strict=True)
        ]

    def prompts(self, run_id: str) -> dict[int, RecordedInput]:
        """Every model call's input, by position (``RunHandle.prompts``)."""
        return self.inputs(run_id, [e.event for e in self.logged(run_id, self.location(run_id))])

    def inputs(self, run_id: str, events: list[Event]) -> dict[int, RecordedInput]:
        try:
            blobs = read_blobs(self.log, self.settings.payloads_topic, events, self.serde.sealer)
            return rebuild_inputs(events, blobs)
        except (PayloadMissing, PromptMissing) as error:
            raise AgentlogError(f"run {run_id}: {error}") from error

    def _prompt_fields(self, run_id: str, events: list[Event]) -> dict[int, dict[str, Any]]:
        fields: dict[int, dict[str, Any]] = {}
        for position, recorded in self.inputs(run_id, events).items():
            try:
                args = checked_args(recorded)
                # The params whole: values the run stored once are filled in (runtime.log.records.references).
                params = canonical_json(args["params"]) if args["params"] else None
                fields[position] = {"messages": args["messages"], "params": params}
            except PromptMissing as error:
                fields[position] = {"messages": None, "prompt_error": str(error)}
        return fields

    def with_payloads(self, run_id: str, events: list[Event]) -> list[Event]:
        """``events`` with their out-of-line results read back (checked) and carried inline.
        Raises AgentlogError if a stored result is missing or does not match its checksum."""
        try:
            return inlined(
                events,
                read_back(
                    self.log, self.settings.payloads_topic, self.partition(run_id), events, self.serde.sealer
                ),
            )
        except PayloadMissing as error:
            raise AgentlogError(f"run {run_id}: {error}") from error

    def location(self, run_id: str) -> RunLocation | None:
        """Where the run index (runtime.log.records.run_index) says the run's records lie, or None if it
        does not locate the run: its entries on the run's partition of the compacted checkpoints
        topic, far smaller than the events partition. An entry with the ending's offset wins."""
        key = run_key(run_id)
        found: RunLocation | None = None
        for record in self.log.read(
            self.settings.checkpoints_topic, self.partition(run_id), keep=lambda k: k == key
        ):
            location = parse_location(record.value) if record.value is not None else None
            if location is not None and (found is None or found.end is None or location.end is not None):
                found = location
        return found

    def logged(self, run_id: str, location: RunLocation | None, end: int | None = None) -> list[LoggedEvent]:
        """The run's events up to ``end``: read from its RunStarted's offset when ``location``
        gives one and the record there is that RunStarted (the run has no record before it), and
        only up to its ending event when ``location`` gives that too and the record there is one
        (the run has no record after it); else from the partition's start."""
        if location is not None:
            last = location.end if location.end is not None and (end is None or location.end < end) else None
            if self.verify_key is not None:
                last = None  # a record after the run's end is read too, and named (the index is no proof)
            logged = list(self.events(run_id, start=location.first, end=end if last is None else last + 1))
            if (
                logged
                and logged[0].offset == location.first
                and isinstance(logged[0].event, RunStarted)
                and (
                    last is None
                    or (logged[-1].offset == last and has_ended(summarize(run_id, logged[-1:]).status))
                )
            ):
                return logged
            logger.warning(
                "run %s: the run index's %s does not hold where its records lie; scanning", run_id, location
            )
        return list(self.events(run_id, end=end))

    def ending_at(self, run_id: str, location: RunLocation | None, end: int) -> LoggedEvent | None:
        """The run's ending event at the offset ``location`` gives, if the record there is one."""
        if location is None or location.end is None or location.end >= end or self.verify_key is not None:
            return None  # verifying: the ending is checked among the run's records, read from its start
        found = next(iter(self.events(run_id, start=location.end, end=location.end + 1)), None)
        if (
            found is not None
            and found.offset == location.end
            and has_ended(summarize(run_id, [found]).status)
        ):
            return found
        logger.warning(
            "run %s: the run index's offset %s is not its ending event; scanning", run_id, location.end
        )
        return None

    def status(self, run_id: str) -> RunStatus:
        """The run's status read from its events (``RunHandle.status``)."""
        return summarize(run_id, self.logged(run_id, self.location(run_id)))


def _signed(event: Event, forged: str | None) -> dict[str, Any]:
    """A signed record's signature as hex text (runtime.log.records.signing), and where a client
    with the verify key found a record no worker wrote, why."""
    fields: dict[str, Any] = {}
    signature = getattr(event, "signature", None)
    if isinstance(signature, bytes):
        fields["signature"] = signature.hex()
    if forged is not None:
        fields["forged"] = forged
    return fields
