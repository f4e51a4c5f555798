"""PydanticAI messages recorded compact: without the keys that hold their field's default.

PydanticAI's JSON of a ``ModelResponse`` is ~1,000 bytes of which ~175 are content: the rest is
keys holding ``null``, zero usage counters and empty objects (``provider_details``, ``run_id``,
``workspace_ref``, ``cache_write_tokens`` ...). A model call records its response, and the next
request's messages carry it again, so both are recorded compact.

The rule, applied to a message's own keys, its parts' own keys and its usage's keys (never
inside content: a tool's arguments or return value are the user's data, kept as they are):
drop a key whose value is ``null``, ``{}``, ``[]``, a numeric zero, or one of the string defaults
in ``_STRING_DEFAULTS``. Discriminators (``kind``, ``part_kind``, ``tool_kind`` when set) are
non-empty strings, so they stay: PydanticAI reads the compact form back by them.

Guaranteed, not assumed: a compact message is kept only when PydanticAI's own decoding of it,
dumped again, is byte for byte the full form (canonical JSON) -- a response with the codec the
capability journals with (``JSON_CODEC``, ``ModelResponse``), a request message with
``ModelMessagesTypeAdapter``. Otherwise the full form is recorded. A key whose field a PydanticAI
release adds with a ``None`` default is dropped too, so such a release does not change the
recorded form (and the model call's args hash) of messages that do not use it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import orjson
from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.durable_exec import JSON_CODEC
from pydantic_ai.messages import _JOURNAL_CONTEXT, ModelResponse
from pydantic_core import ValidationError

_STRING_DEFAULTS = {"state": "complete", "outcome": "success"}
_KINDS = ("request", "response")
# Request messages checked already (by the blake2b of their full form's canonical JSON): an agent
# resends its whole transcript on every request, so each message is checked once, not once a step.
_CHECKED_MAX = 4096
_checked: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
_checked_lock = threading.Lock()  # agents of several runs record from their own threads


def _is_default(key: str, value: Any) -> bool:
    if value is None or value in ({}, []):
        return True
    if type(value) in (int, float):
        return bool(value == 0)
    return isinstance(value, str) and _STRING_DEFAULTS.get(key) == value


def _dropped(mapping: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if not _is_default(k, v)}


def compact_form(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` (PydanticAI's JSON of a ``ModelRequest`` or ``ModelResponse``) by the rule
    above, unchecked."""
    compact = _dropped(message)
    parts = message.get("parts")
    if isinstance(parts, list):
        compact["parts"] = [_dropped(p) if isinstance(p, dict) else p for p in parts]
    usage = compact.get("usage")
    if isinstance(usage, dict):
        shrunk = _dropped(usage)
        if shrunk:
            compact["usage"] = shrunk
        else:
            del compact["usage"]
    return compact


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _reads_back(
    compact: dict[str, Any], full: dict[str, Any], *, as_response: bool, full_json: bytes | None = None
) -> bool:
    """``full_json``: ``full``'s canonical JSON, if the caller has it."""
    try:
        if as_response:
            again = JSON_CODEC.dump(ModelResponse, JSON_CODEC.load(ModelResponse, compact))
        else:
            decoded = ModelMessagesTypeAdapter.validate_python([compact], context=_JOURNAL_CONTEXT)
            again = ModelMessagesTypeAdapter.dump_python(decoded, mode="json")[0]
    except (ValidationError, TypeError, ValueError):
        return False
    return _canonical(again) == (full_json if full_json is not None else _canonical(full))


def compact_response(response: Any) -> Any:
    """A model call's result as PydanticAI's codec dumped it (a ``ModelResponse``), compact when
    that reads back as the same response; anything else (a streamed result) as it is."""
    if not isinstance(response, dict) or response.get("kind") != "response":
        return response
    compact = compact_form(response)
    return compact if _reads_back(compact, response, as_response=True) else response


def compact_message(message: Any) -> Any:
    """A request's message (PydanticAI's JSON, timestamps still in it) compact when that reads
    back as the same message; checked once per distinct message (``_checked``)."""
    if not isinstance(message, dict) or message.get("kind") not in _KINDS:
        return message
    full_json = _canonical(message)
    key = hashlib.blake2b(full_json, digest_size=16).digest()
    with _checked_lock:
        known = _checked.get(key)
        if known is not None:
            _checked.move_to_end(key)
            return known
    compact = compact_form(message)
    chosen = compact if _reads_back(compact, message, as_response=False, full_json=full_json) else message
    with _checked_lock:
        _checked[key] = chosen
        if len(_checked) > _CHECKED_MAX:
            _checked.popitem(last=False)
    return chosen
