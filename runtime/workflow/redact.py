"""Secrets stay out of the log: arguments named like secrets are replaced by a hash before recording.

An argument (of a tool; a model call's params -- its messages are content, not scanned) is redacted
when its name (at any depth, case-insensitive) is one of
``SECRET_NAMES`` or ends in ``_`` + one of them (``x_api_key``, ``access_token``, but not
``max_tokens``), or when the tool names it in ``@app.tool(..., redact=("card",))``. Its value is
replaced by ``"[redacted sha256:<16 hex>]"``: a sha256 of the run's key root (the original run of
a reset), the argument's name and its canonical value. So the log never holds the value, while
equal values in one run (and in its resets) still look equal: replay still notices a changed
secret, and an effect keyed on a redacted argument keeps its idempotency key.

The hash is salted with the run, not keyed with a secret the log never sees: a low-entropy
value (a card number) could be recovered by trying every candidate against it. Pure functions.

The call itself receives the real values; only what is recorded (the arguments, the args hash,
the idempotency key) is derived from the redacted ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

from runtime.workflow.canonical import canonical_json

SECRET_NAMES = frozenset({"api_key", "apikey", "authorization", "password", "passwd", "secret", "token"})
_SUFFIXES = tuple(f"_{name}" for name in SECRET_NAMES)


def is_secret_name(name: str, extra: Collection[str] = ()) -> bool:
    lowered = name.lower().replace("-", "_")
    return lowered in SECRET_NAMES or lowered.endswith(_SUFFIXES) or name in extra


# Argument names come from code, so a run meets the same few again and again: remember the verdict
# (bounded: keys of data-shaped dicts could be anything). This runs for every call of every step.
_VERDICTS: dict[str, bool] = {}
_VERDICTS_MAX = 4096


def _secret(name: str, extra: Collection[str]) -> bool:
    if extra and name in extra:
        return True
    verdict = _VERDICTS.get(name)
    if verdict is None:
        verdict = is_secret_name(name)
        if len(_VERDICTS) < _VERDICTS_MAX:
            _VERDICTS[name] = verdict
    return verdict


def _has_secret(value: Any, extra: Collection[str]) -> bool:
    if isinstance(value, dict):
        verdicts = _VERDICTS
        for key, item in value.items():
            # Inline of _secret for a name seen before (every call of every step meets them).
            verdict = verdicts.get(key) if not extra else None
            if verdict is None:
                verdict = isinstance(key, str) and _secret(key, extra)
            if verdict:
                return True
            if isinstance(item, (dict, list)) and _has_secret(item, extra):
                return True
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and _has_secret(item, extra):
                return True
    return False


def redacted_value(salt: str, name: str, value: Any) -> str:
    digest = hashlib.sha256(f"{salt}\x00{name}\x00{canonical_json(value)}".encode()).hexdigest()[:16]
    return f"[redacted sha256:{digest}]"


def redact(value: Any, salt: str, extra: Collection[str] = ()) -> Any:
    """``value`` with every secret-named entry replaced; the same object when nothing was (the
    common case is one scan, no copy)."""
    return _redacted(value, salt, extra) if _has_secret(value, extra) else value


def _redacted(value: Any, salt: str, extra: Collection[str]) -> Any:
    if isinstance(value, dict):
        return {
            key: redacted_value(salt, key, item)
            if isinstance(key, str) and _secret(key, extra)
            else _redacted(item, salt, extra)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redacted(item, salt, extra) for item in value]
    return value
