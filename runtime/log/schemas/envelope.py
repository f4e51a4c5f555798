"""An event's fencing epoch, read from its Avro bytes without decoding the record.

A client's result tail (``runtime.results``) follows every record of the runs it waits for, but
needs the whole record only at a run's end: of the others it needs the epoch alone, to keep its
partition's fence (``runtime.log.records.fencing``). Every event schema starts with the envelope
``seq, occurred_at, worker, epoch`` (``Record``'s fields in order), so the epoch is the fourth
value of the datum: two varints and a string are skipped to reach it -- a few microseconds,
where fastavro decoding the record (a model call's result and prompt with it) costs tens.

Only a writer schema that does start so is read this way (``leads_with_envelope``, decided once
per schema id); a record of any other schema is decoded as usual.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import AgentlogError

# Record's envelope, as the Avro fields every event schema starts with: (name, Avro type).
_ENVELOPE = (("seq", "long"), ("occurred_at", "long"), ("worker", "string"), ("epoch", "long"))


class Truncated(AgentlogError, ValueError):
    """The datum ends inside the envelope: not a record this code wrote."""


def leads_with_envelope(writer_schema: Any) -> bool:
    """Whether the parsed writer schema's first fields are the envelope, with its types."""
    fields = writer_schema.get("fields") if isinstance(writer_schema, dict) else None
    if not isinstance(fields, list) or len(fields) < len(_ENVELOPE):
        return False
    for field, (name, avro_type) in zip(fields, _ENVELOPE, strict=False):
        declared = field.get("type")
        if isinstance(declared, dict):  # a logical type (timestamp-millis) over its base type
            declared = declared.get("type")
        if field.get("name") != name or declared != avro_type:
            return False
    return True


def epoch_of(data: bytes, start: int) -> int:
    """The epoch of the datum at ``data[start:]``, whose writer schema leads with the envelope.
    Raises Truncated if the bytes end before it."""
    _, at = _varint(data, start)  # seq
    _, at = _varint(data, at)  # occurred_at
    length, at = _varint(data, at)  # worker: a length, then that many bytes
    epoch, _ = _varint(data, at + length)
    return epoch


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The zig-zag varint at ``at`` (Avro's int and long) and the offset after it."""
    shift = raw = 0
    while True:
        if at >= len(data) or shift > 63:
            raise Truncated("the datum ends inside its envelope")
        byte = data[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7
