"""The runs of the store whose status rests on a record no worker signed (issue 40), for readers of
the store that hold the workers' public key (``verify_key``): the UI shows them as FORGED.

The store keeps each status-bearing record's signature (migration 23) and every record's chain
link, so a row is turned back into its bytes (analytics.row_bytes, with the writer schema the sink
stored) and checked as a client checks it (runtime.log.records.signing): a status record whose
signature does not verify over the link of one of the run's records before it (nearest first), or
that repeats a signature read before (a copy), is forged. Two queries for any number of runs: the
status rows, and the links of every row of those runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from runtime.config import Settings
from runtime.log.records.chain import START
from runtime.log.records.signing import SIGNED_TYPES, signed_by, verify_key_of

from .audit import _field_maps, iso_to_ms
from .results import JsonValue
from .row_bytes import reencoded
from .store import QueryStore
from .tables import EVENTS, WRITER_SCHEMAS


def forged_statuses(store: QueryStore, settings: Settings, run_ids: Sequence[str]) -> dict[str, str]:
    """Run id -> the first of its status records no worker signed, named; {} without the verify key."""
    key = verify_key_of(settings.verify_key)
    if key is None or not run_ids:
        return {}
    params = {"runs": sorted(set(run_ids)), "topic": settings.events_topic, "types": sorted(SIGNED_TYPES)}
    where = "run_id IN {runs:Array(String)} AND topic = {topic:String} AND fenced = 0"
    links: dict[str, list[tuple[int, bytes]]] = defaultdict(list)  # run -> (offset, link) in log order
    for run_id, offset, link in store.query(
        f"SELECT run_id, offset, hex(ifNull(chain, '')) FROM {EVENTS} WHERE {where} ORDER BY run_id, partition, offset",
        params,
    ).rows:
        links[str(run_id)].append((int(str(offset)), bytes.fromhex(str(link))))
    result = store.query(
        f"SELECT *, hex(ifNull(signature, '')) AS signature_hex, hex(ifNull(chain, '')) AS chain_hex "
        f"FROM {EVENTS} WHERE {where} AND type IN {{types:Array(String)}} ORDER BY run_id, partition, offset",
        params,
    )
    timestamps = {c for c, t in zip(result.columns, result.types, strict=False) if "DateTime" in t}
    rows = list(result.dicts())
    schema_ids = sorted({int(str(r["schema_id"])) for r in rows})
    fields_of = _field_maps(store, schema_ids)
    writers = _writer_texts(store, schema_ids)
    forged: dict[str, str] = {}
    seen: dict[str, set[bytes]] = defaultdict(set)
    for row in rows:
        run_id, offset = str(row["run_id"]), int(str(row["offset"]))
        if run_id in forged:
            continue
        where_ = f"{settings.events_topic}[{row['partition']}]@{offset} ({row['type']})"
        signature = bytes.fromhex(str(row["signature_hex"]))
        if not signature:
            forged[run_id] = f"{where_}: it carries no worker's signature"
            continue
        if signature in seen[run_id]:
            forged[run_id] = f"{where_}: a copy of a signed record before it"
            continue
        schema_id = int(str(row["schema_id"]))
        event: dict[str, JsonValue] = {}
        for field, column in fields_of.get(schema_id, []):
            value = row.get(column)
            event[field] = iso_to_ms(value) if column in timestamps else value
        text = writers.get(schema_id)
        if text is None:
            forged[run_id] = f"{where_}: its writer schema {schema_id} is not in the store: not checked"
            continue
        value = reencoded(text, schema_id, event, bytes.fromhex(str(row["chain_hex"])), signature)
        before = [link for at, link in reversed(links[run_id]) if at < offset and link]
        candidates = list(dict.fromkeys([*before, START]))
        if not any(signed_by(key, run_id.encode(), previous, value) for previous in candidates):
            forged[run_id] = (
                f"{where_}: its signature is not a worker's over its bytes and the run's records before it"
            )
            continue
        seen[run_id].add(signature)
    return forged


def _writer_texts(store: QueryStore, schema_ids: Sequence[int]) -> dict[int, str]:
    if not schema_ids:
        return {}
    result = store.query(
        f"SELECT schema_id, definition FROM {WRITER_SCHEMAS} FINAL WHERE schema_id IN {{ids:Array(Int32)}}",
        {"ids": list(schema_ids)},
    )
    return {int(str(sid)): str(text) for sid, text in result.rows}
