"""A framework's model response recorded short: what its record's own fields say, said once.

A framework integration records a model call's result as ``{"response": R}``, R the framework's
JSON of the response (runtime.integrations.calls.ModelResult). R holds what the record holds again
as fields -- the answering model's name (``response_model``) and the token counts
(``input_tokens``, ``output_tokens``, ``cached_tokens``) -- and spends ~90 bytes a step on its kind
and timestamps as text. Recorded short, the result is ``{"r": S}``, S being R:

- without ``"kind": "response"`` (a short result is always a response);
- without ``model_name`` when the record's ``response_model`` holds it;
- without the counts of ``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_tokens``) that
  the record's fields hold (not zero: a zero count is not in R either), ``usage`` left out once empty;
- with ``request_timestamp`` as an integer of microseconds since the epoch, ``timestamp`` as an
  integer of microseconds after ``request_timestamp`` (after the epoch without one), and
  ``duration`` as an integer of microseconds -- each only where the text is the one this module
  writes back (ISO 8601 UTC, six fraction digits; ``PT<seconds>S``).

The names are PydanticAI's (``ModelResponse``); the form is agentlog's, read without the framework.
``short_result`` keeps a result short only when ``full_text`` rebuilds its canonical JSON byte for
byte from the short form and the fields, so a reader never sees a response other than the one
recorded; every reader of a model result reads it through ``full_text`` / ``full_value`` (the run
machine, the message sequence's edit bases, the stream, the audit). Results recorded before keep
their form and read as they are. Pure functions: no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from runtime.log.records.events import ModelCallCompleted

SHORT = "r"
FULL = "response"
_SHORT_PREFIX = '{"r":'
# (key of R's usage, the record field that holds it)
_COUNTS = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cached_tokens"),
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)  # formatting only: no zone in the text it makes
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_DURATION = re.compile(r"PT\d+(\.\d{1,6})?S")


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _micros(text: str) -> int:
    # ``text`` matched _ISO: fromisoformat reads it as strptime would, a tenth of the time.
    return (datetime.fromisoformat(text) - _EPOCH) // timedelta(microseconds=1)


@functools.lru_cache(maxsize=256)
def _iso(micros: int) -> str:
    # Read at every step, each value several times (the run machine, the message sequence, the
    # stream): kept for the last values, and formatted by isoformat, twice as fast as strftime. The
    # same text as ``strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` (tests/unit/test_short_records.py), which
    # gives a year before 1000 unpadded: those keep it.
    at = _NAIVE_EPOCH + timedelta(microseconds=micros)
    if at.year < 1000:
        return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return at.isoformat(timespec="microseconds") + "Z"


def _duration_text(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    return f"PT{seconds}S" if not fraction else f"PT{seconds}.{fraction:06d}".rstrip("0") + "S"


def _duration_micros(text: str) -> int:
    seconds, _, fraction = text[2:-1].partition(".")
    return int(seconds) * 1_000_000 + int((fraction or "0").ljust(6, "0"))


def short_result(response: Any, model: str | None, counts: Mapping[str, int | None]) -> dict[str, Any] | None:
    """``{"r": S}`` for ``response`` (a response's JSON, kind ``"response"``) when the record will
    hold ``model`` as ``response_model`` and ``counts`` (by field name) as its token fields; None
    when the short form would not read back as the same response (record ``{"response": ...}``)."""
    if not isinstance(response, dict) or response.get("kind") != "response":
        return None
    short = {k: v for k, v in response.items() if k != "kind"}
    if model and short.get("model_name") == model:
        del short["model_name"]
    usage = short.get("usage")
    if isinstance(usage, dict):
        kept = dict(usage)
        for key, field in _COUNTS:
            held = _count(counts.get(field))
            if held is not None and type(kept.get(key)) is int and kept[key] == held:
                del kept[key]
        if kept:
            short["usage"] = kept
        else:
            del short["usage"]
    requested = short.get("request_timestamp")
    if isinstance(requested, str) and _ISO.fullmatch(requested):
        short["request_timestamp"] = _micros(requested)
    answered = short.get("timestamp")
    if isinstance(answered, str) and _ISO.fullmatch(answered):
        base = short["request_timestamp"] if type(short.get("request_timestamp")) is int else 0
        short["timestamp"] = _micros(answered) - base
    took = short.get("duration")
    if isinstance(took, str) and _DURATION.fullmatch(took):
        short["duration"] = _duration_micros(took)
    result = {SHORT: short}
    rebuilt = _full(short, model, counts)
    return result if rebuilt is not None and _canonical(rebuilt) == _canonical({FULL: response}) else None


def _full(short: Any, model: str | None, counts: Mapping[str, int | None]) -> dict[str, Any] | None:
    if not isinstance(short, dict):
        return None
    response = dict(short)
    response["kind"] = "response"
    if model and "model_name" not in response:
        response["model_name"] = model
    usage = response.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return None
    restored = dict(usage or {})
    for key, field in _COUNTS:
        held = _count(counts.get(field))
        if held is not None and key not in restored:
            restored[key] = held
    if restored:
        response["usage"] = restored
    requested = response.get("request_timestamp")
    if type(requested) is int:
        response["request_timestamp"] = _iso(requested)
    answered = response.get("timestamp")
    if type(answered) is int:
        response["timestamp"] = _iso(answered + (requested if type(requested) is int else 0))
    took = response.get("duration")
    if type(took) is int:
        response["duration"] = _duration_text(took)
    return {FULL: response}


def is_short(text: str) -> bool:
    return text.startswith(_SHORT_PREFIX)


def _fields(event: ModelCallCompleted) -> dict[str, int | None]:
    return {
        "input_tokens": event.input_tokens,
        "output_tokens": event.output_tokens,
        "cached_tokens": event.cached_tokens,
    }


def full_value(event: ModelCallCompleted) -> Any:
    """A model call's recorded result (``event.result`` with the record's fields) as the call
    returned it, parsed."""
    value = orjson.loads(event.result)
    if not (is_short(event.result) and isinstance(value, dict) and len(value) == 1):
        return value
    full = _full(value[SHORT], event.response_model, _fields(event))
    return value if full is None else full


def full_text(event: ModelCallCompleted) -> str:
    """``full_value``'s canonical JSON (the recorded text itself when it is not short)."""
    if not is_short(event.result):
        return event.result
    return _canonical(full_value(event)).decode()
