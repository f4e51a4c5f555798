"""Many runs' histories read at once: one pass over each partition that holds any of them, keeping
only their records (a what-if compares hundreds of runs; a read per run would scan a partition per run)."""

from __future__ import annotations

from collections.abc import Collection

from runtime.client import Client
from runtime.log.port.partitioning import partition_for
from runtime.log.records.events import PARTITION_TYPES, Event
from runtime.log.records.fencing import FenceFilter
from runtime.log.schemas.datum import DecodeError


def read_histories(client: Client, run_ids: Collection[str]) -> dict[str, list[Event]]:
    """Each run's events in log order, fenced records dropped, out-of-line results read back
    (AgentlogError if one is missing). A run the log does not hold gets an empty history; a record
    this code cannot decode is left out (the worker parks a run with one, so its status says so)."""
    settings = client.settings
    wanted = {r.encode("utf-8") for r in run_ids}
    found: dict[str, list[Event]] = {r: [] for r in run_ids}
    for partition in sorted({partition_for(r, settings.partitions) for r in run_ids}):
        fence = FenceFilter()
        for record in client.log.read(
            settings.events_topic, partition, keep=lambda k: k is None or k in wanted
        ):
            if record.value is None:
                continue
            try:
                event = client.serde.decode(record.value, record.key)
            except DecodeError:
                continue
            assert isinstance(event, Event)
            admitted = fence.admit(event, record.offset) and not isinstance(event, PARTITION_TYPES)
            if admitted and event.run_id in found:
                found[event.run_id].append(event)
    return {r: client.run(r).with_payloads(events) if events else events for r, events in found.items()}
