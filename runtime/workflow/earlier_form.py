"""Model messages that also know how an earlier release recorded them.

An integration that changes the recorded form of the same input (runtime.integrations.pydantic_ai
records its messages compact since the change that added this module) would otherwise make every
model call of a run recorded before it read as a changed prompt on replay (``PromptDrifted``),
although the agent asks exactly what it asked. ``ctx.model(messages=Messages(compact, earlier=...))``
records ``compact`` and hashes it; replay also accepts the hash of ``earlier()`` -- computed only
when the recorded hash is not the new one, so runs recorded by the new code pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.workflow.transcript_hash import TranscriptHash


class Messages(list[dict[str, Any]]):
    """A model call's messages (recorded as the list they are) and ``earlier``: the same messages
    in the form an earlier release recorded.

    ``encoded``: each message's canonical JSON (``orjson``, sorted keys) and that text's sha256
    digest, when the caller keeps them already (an integration whose transcript is resent at every
    request turns each message once): the call's hash and its message sequence are then made from
    them rather than by serializing the whole transcript again. They must be exactly those of the
    messages (tests check the integration's); the messages must not change after. ``transcript``:
    with ``encoded``, the run's hash state kept from its call before (runtime.workflow.transcript_hash)."""

    __slots__ = ("earlier", "encoded", "transcript")

    def __init__(
        self,
        messages: list[dict[str, Any]],
        *,
        earlier: Callable[[], list[dict[str, Any]]],
        encoded: list[tuple[bytes, bytes]] | None = None,
        transcript: TranscriptHash | None = None,
    ) -> None:
        super().__init__(messages)
        self.earlier = earlier
        self.encoded = encoded
        self.transcript = transcript
