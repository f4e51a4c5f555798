"""Each message of a PydanticAI agent run turned into its recorded forms once, not once a request.

An agent resends its whole transcript with every model request, and each request's messages are
recorded (``units.recorded_messages``): turning all of them into JSON, compacting and checking each
again at every step made the cost of a step grow with the run (the largest cost in a 40-step run's
profile). The transcript's messages are the same objects from one request to the next, so an agent
run keeps each message's forms by the message object, and turns only the new ones.

A message PydanticAI changes after it was turned (it assigns a field, e.g. a response's ``run_id``
once sent back, or replaces a part) is turned again: its forms are kept with a fingerprint of its
fields and its parts' fields by identity, checked at each use. The forms are a function of the
message alone, so a replayed agent, which builds the same messages at the same steps, records the
same forms.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_
from typing import Any

from runtime.integrations.pydantic_ai.per_run import PerRun
from runtime.workflow.transcript_hash import TranscriptHash

# What a message is turned into: its recorded form, the form an earlier release recorded, and the
# recorded form's canonical JSON with its sha256 digest (runtime.workflow.earlier_form.Messages).
Forms = tuple[dict[str, Any], dict[str, Any], tuple[bytes, bytes]]
# (the message, its fingerprint, its forms)
_Entry = tuple[Any, list[Any], Forms]
Turn = Callable[[Any], Forms]


def _fingerprint(message: Any) -> list[Any] | None:
    """The values of the message's fields, then each part and its fields' values, compared by
    identity at the next use (``_unchanged``); None if it is not a dataclass instance (never reused).
    The values themselves, not their ids: a value replaced and freed cannot pass for its successor
    by a reused id, and a list is built faster than ids are taken (every message of the transcript
    is fingerprinted at every request)."""
    fields = getattr(message, "__dict__", None)
    if fields is None:
        return None
    marks = [*fields.values()]
    for part in getattr(message, "parts", ()) or ():
        part_fields = getattr(part, "__dict__", None)
        if part_fields is None:
            return None
        marks.append(part)
        marks += part_fields.values()
    return marks


def _unchanged(kept: list[Any], marks: list[Any]) -> bool:
    return len(kept) == len(marks) and all(map(is_, kept, marks))


class MessageForms:
    """One agent run's messages' recorded forms, by message object."""

    __slots__ = ("_entries", "transcript")

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        # The run's model calls' args hash state (runtime.workflow.transcript_hash).
        self.transcript = TranscriptHash()

    def forms(self, messages: list[Any], turn: Turn) -> list[Forms]:
        """Each message's forms, ``turn(message)`` for the ones not kept."""
        turned: list[Forms] = []
        live: dict[int, _Entry] = {}
        entries = self._entries
        for message in messages:
            key = id(message)
            marks = _fingerprint(message)
            entry = entries.get(key)
            if entry is None or entry[0] is not message or marks is None or not _unchanged(entry[1], marks):
                entry = (message, marks or [], turn(message))
            live[key] = entry
            turned.append(entry[2])
        self._entries = live  # only the transcript's messages: a message dropped is let go
        return turned


# The forms kept for an agent run, made on first use, let go with it.
forms_of = PerRun(MessageForms).of
