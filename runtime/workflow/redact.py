"""Secrets stay out of the log: arguments named like secrets are replaced by a hash before recording.

An argument is redacted when its name (at any depth of the arguments, case-insensitive) is one of
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


def redacted_value(salt: str, name: str, value: Any) -> str:
    digest = hashlib.sha256(f"{salt}\x00{name}\x00{canonical_json(value)}".encode()).hexdigest()[:16]
    return f"[redacted sha256:{digest}]"


def redact(value: Any, salt: str, extra: Collection[str] = ()) -> Any:
    """``value`` with every secret-named entry replaced; the same object when nothing was."""
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key, extra):
                out[key] = redacted_value(salt, key, item)
                changed = True
            else:
                out[key] = new = redact(item, salt, extra)
                changed = changed or new is not item
        return out if changed else value
    if isinstance(value, list):
        items = [redact(item, salt, extra) for item in value]
        return items if any(new is not old for new, old in zip(items, value, strict=True)) else value
    return value
