"""The sealed form of a value, the key ids, and which fields of which records hold a run's contents.

A sealed value is the string ``sealed:v1:<key id>:<base64 nonce + ciphertext>``: the key id in
the clear says which key opens it (not the record's run id), so a fork or a reset that copies
another run's records keeps them readable, and a run sealed under its subject's key needs no
schema field to say so.

It lives with the records, not with the sealer: it is part of how a record is written, and the
records (payloads read back) must recognise a sealed value without importing the sealer.
"""

from __future__ import annotations

PREFIX = "sealed:v1:"
# What an erased field reads as: JSON text (the fields hold JSON), so a reader that parses it gets
# the string "erased" rather than a decode error.
ERASED = '"erased"'
SUBJECT_PREFIX = "subject/"

# The fields of each record type that hold a run's contents. Errors, names, hashes and usage stay clear.
CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "RunSubmitted": ("input", "seed"),  # seed: the records a reset or fork copies, as JSON
    "RunStarted": ("input",),
    "RunContinuedAsNew": ("input",),
    "RunRejected": ("raw",),
    "RunCompleted": ("result",),
    "ModelCallScheduled": ("args", "new_messages", "params"),
    "ModelCallCompleted": ("result",),
    "ToolCallScheduled": ("args",),
    "ToolCallCompleted": ("result",),
    "SignalSent": ("payload",),
    "SignalReceived": ("payload",),
    # Child runs (runtime.workflow.children): a ChildEnded is sealed under the parent's key.
    "ChildRunScheduled": ("input",),
    "ChildRunEnded": ("result",),
    "ChildRunSignalled": ("payload",),
    "ChildEnded": ("result",),
}

# Every field a value is sealed as: the records' content fields, and the payloads topic's values.
SEALED_AS: tuple[str, ...] = (
    *dict.fromkeys(n for names in CONTENT_FIELDS.values() for n in names),
    "payload",
)


def subject_key_id(subject: str) -> str:
    """The key id of a data subject's key, which seals the contents of every run about it."""
    if not subject:
        raise ValueError("a data subject must be a non-empty string")
    return SUBJECT_PREFIX + subject


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX)


def key_id_of(value: str) -> str:
    """The key id a sealed value names."""
    return value[len(PREFIX) : value.rindex(":")]
