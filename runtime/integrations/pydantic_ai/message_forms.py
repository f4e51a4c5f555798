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

import weakref
from collections.abc import Callable
from typing import Any

# (the message, its fingerprint, its recorded form, the form an earlier release recorded)
_Entry = tuple[Any, tuple[int, ...], dict[str, Any], dict[str, Any]]
Turn = Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]


def _fingerprint(message: Any) -> tuple[int, ...]:
    fields = getattr(message, "__dict__", None)
    if fields is None:
        return (-1,)  # not a dataclass instance: never reused
    marks = [id(value) for value in fields.values()]
    for part in getattr(message, "parts", ()) or ():
        part_fields = getattr(part, "__dict__", None)
        if part_fields is None:
            return (-1,)
        marks.append(id(part))
        marks.extend(id(value) for value in part_fields.values())
    return tuple(marks)


class MessageForms:
    """One agent run's messages' recorded forms, by message object."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}

    def forms(self, messages: list[Any], turn: Turn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Each message's recorded form and earlier form, ``turn(message)`` for the ones not kept."""
        recorded: list[dict[str, Any]] = []
        earlier: list[dict[str, Any]] = []
        live: dict[int, _Entry] = {}
        for message in messages:
            key = id(message)
            mark = _fingerprint(message)
            entry = self._entries.get(key)
            if entry is None or entry[0] is not message or entry[1] != mark or mark == (-1,):
                form, before = turn(message)
                entry = (message, mark, form, before)
            live[key] = entry
            recorded.append(entry[2])
            earlier.append(entry[3])
        self._entries = live  # only the transcript's messages: a message dropped is let go
        return recorded, earlier


_BY_RUN: weakref.WeakKeyDictionary[object, MessageForms] = weakref.WeakKeyDictionary()


def forms_of(run: object) -> MessageForms:
    """The message forms kept for ``run`` (an agent run), made on first use, let go with it."""
    forms = _BY_RUN.get(run)
    if forms is None:
        forms = _BY_RUN[run] = MessageForms()
    return forms
