"""A model call's args hash over a transcript, hashed on from where the run's call before left off.

A framework agent resends its whole transcript with every model request, one or two messages
longer each time, and the call's args hash (``canonical.model_args_hash_and_size``) is sha256 over
all of it: hashing the whole text again at every step made the cost of a step grow with the run.
sha256 reads its input in order, so the state after the messages the call before sent is kept,
and a call that sends those same messages first (the same model, each message's digest the same)
hashes only what follows them. Anything else starts over. The hash is the same either way
(tests/unit/test_transcript_hash.py): a replay, which hashes its calls afresh, matches it.
Pure: no I/O; one instance per agent run (not shared between threads).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def text_chars(data: bytes) -> int:
    """How many characters the UTF-8 ``data`` has (the size a model call's prompt is measured by)."""
    return len(data) if data.isascii() else len(data.decode())


class TranscriptHash:
    """The sha256 state of a model call's hashed text up to the end of its messages."""

    __slots__ = ("_chars", "_digests", "_name", "_state")

    def __init__(self) -> None:
        self._name: str | None = None
        self._digests: list[bytes] = []
        self._state: Any = None  # hashlib's sha256 object
        self._chars = 0

    def through_messages(self, name: str, encoded: list[tuple[bytes, bytes]]) -> tuple[Any, int]:
        """A sha256 state (the caller's to finish) over ``["model", name, {"messages": [...`` with
        each message's canonical JSON (``encoded``: text, digest), and how many characters that
        text has."""
        digests = [digest for _, digest in encoded]
        kept = len(self._digests)
        if (
            self._state is not None
            and self._name == name
            and kept <= len(digests)
            and digests[:kept] == self._digests
        ):
            state, chars, start = self._state.copy(), self._chars, kept
        else:
            head = orjson.dumps(["model", name])[:-1] + b',{"messages":['
            state, chars, start = hashlib.sha256(head), text_chars(head), 0
        for i in range(start, len(encoded)):
            text = encoded[i][0]
            piece = b"," + text if i else text
            state.update(piece)
            chars += text_chars(piece)
        self._name, self._digests, self._state, self._chars = name, digests, state.copy(), chars
        return state, chars
