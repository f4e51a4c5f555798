"""Canonical JSON, argument hashes and idempotency keys (pure functions).

Keys are derived from the run, never from the clock or a fresh uuid4, so a call re-executed
after a crash carries the same key and the tool can recognise it:
``uuid5(NAMESPACE, f"{run_id}/{tool}/{sha256(canonical_json(args))}/{n}")`` where ``n``
counts earlier identical (tool, args) calls in the same run -- not the step index, so a
re-decided plan that shifts step numbers keeps the keys of the actions it repeats.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import orjson

from runtime.workflow.transcript_hash import TranscriptHash, text_chars

NAMESPACE = uuid.UUID("6d1c3a52-8f0e-5b8e-9a61-5f0c2f6a7b10")


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept; raises TypeError on non-JSON values.

    orjson, because this runs for every argument hash and every recorded result: the stdlib
    encoder would make hashing a visible share of each step.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError as error:
        raise TypeError(str(error)) from error


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def args_hash(kind: str, name: str, args: Any) -> str:
    """Replay compares this: 64 bits of sha256 over kind, name and canonical arguments."""
    return sha256_hex(canonical_json([kind, name, args]))[:16]


def args_hash_and_size(kind: str, name: str, args: Any) -> tuple[str, int]:
    """``args_hash``, and the size of the canonical text it hashed: a model call's prompt measured
    once, where it is serialized anyway (runtime.workflow.tokens estimates from it)."""
    text = canonical_json([kind, name, args])
    return sha256_hex(text)[:16], len(text)


def model_args_hash_and_size(
    name: str,
    encoded: list[tuple[bytes, bytes]],
    params: Any,
    prompt_version: str | None,
    transcript: TranscriptHash | None = None,
) -> tuple[str, int]:
    """``args_hash_and_size("model", name, {"messages": M, "params": ..., "prompt_version": ...})``
    from the canonical JSON of each message of M (``encoded``: text, digest) -- the same text,
    hashed piece by piece rather than serialized again (the keys in sorted order, as canonical_json
    writes them). ``transcript``: the run's hash state from its call before, which hashed the same
    first messages already (runtime.workflow.transcript_hash); without it, all are hashed."""
    try:
        tail = orjson.dumps({"params": params, "prompt_version": prompt_version}, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as error:
        raise TypeError(str(error)) from error
    if transcript is None:
        transcript = TranscriptHash()
    state, chars = transcript.through_messages(name, encoded)
    rest = b"]," + tail[1:] + b"]"
    state.update(rest)
    return state.hexdigest()[:16], chars + text_chars(rest)


def idempotency_key(run_id: str, tool: str, key_args: Any, n: int) -> str:
    digest = sha256_hex(canonical_json(key_args))
    return str(uuid.uuid5(NAMESPACE, f"{run_id}/{tool}/{digest}/{n}"))
