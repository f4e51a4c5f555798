"""A model call's args hash hashed on from the run's call before (runtime.workflow.transcript_hash)
is the hash of the whole call: for a transcript that grows, one changed or cut, another model."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from runtime.workflow.canonical import args_hash_and_size, model_args_hash_and_size
from runtime.workflow.transcript_hash import TranscriptHash

pytestmark = pytest.mark.unit

PARAMS = {"tools": [{"name": "lookup", "description": "ünïcode", "x": 1.5}]}


def _encoded(messages: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    texts = [orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in messages]
    return [(text, hashlib.sha256(text).digest()) for text in texts]


def _whole(name: str, messages: list[dict[str, Any]], version: str | None) -> tuple[str, int]:
    return args_hash_and_size(
        "model", name, {"messages": messages, "params": PARAMS, "prompt_version": version}
    )


def _message(i: int, text: str = "") -> dict[str, Any]:
    return {"kind": "request" if i % 2 == 0 else "response", "parts": [{"content": f"step {i} {text}"}]}


def test_the_hash_kept_from_the_call_before_is_the_whole_calls_hash() -> None:
    transcript = TranscriptHash()
    messages: list[dict[str, Any]] = []
    cases: list[tuple[str, list[dict[str, Any]], str | None]] = []
    for i in range(6):  # a transcript that grows, by one message and by two
        messages = [*messages, _message(i, "é" if i == 3 else "")]
        if i % 2:
            cases.append(("a.model", messages, None))
    cases += [
        ("a.model", messages, "v2"),  # the same messages again, another prompt version
        ("a.model", [*messages[:2], _message(9), *messages[3:]], None),  # one in the middle changed
        ("a.model", messages[:3], None),  # cut shorter
        ("a.model.fast", messages, None),  # another model, the same messages
        ("a.model", [], None),
        ("a.model", messages, None),
    ]
    for name, sent, version in cases:
        kept = model_args_hash_and_size(name, _encoded(sent), PARAMS, version, transcript)
        assert (
            kept
            == model_args_hash_and_size(name, _encoded(sent), PARAMS, version)
            == _whole(name, sent, version)
        )


def test_a_state_handed_out_does_not_change_the_one_kept() -> None:
    transcript = TranscriptHash()
    messages = [_message(0), _message(1)]
    state, _ = transcript.through_messages("a.model", _encoded(messages))
    state.update(b"anything the caller appends")
    again = model_args_hash_and_size("a.model", _encoded([*messages, _message(2)]), PARAMS, None, transcript)
    assert again == _whole("a.model", [*messages, _message(2)], None)
