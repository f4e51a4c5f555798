"""How long a rate-limited provider asks to wait, read from its answer.

The forms, first match wins:
- ``retry-after-ms: 1500`` -- milliseconds (OpenAI sends it; its SDK reads it first too);
- ``Retry-After: 30`` or ``Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`` (RFC 9110 10.2.3: seconds
  or an HTTP date; Anthropic and OpenAI send seconds);
- the body's wording: OpenAI's "Please try again in 59.977s" / "in 1m30s" / "in 20ms" (a Go
  duration), Azure OpenAI's "Please retry after 3 seconds".
A header that does not parse (a negative number, junk, a date that is not one) is ignored, never an
error: the answer is still a rate limit, and the retry policy backs off by itself.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

# A wait longer than this is not a rate limit's but a quota's ("try again in 20h"): kept as asked,
# the retry policy's patience decides; bounded only so an absurd number cannot overflow a timestamp.
_LONGEST_S = 7 * 24 * 3600.0

_UNITS_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# A Go duration ("1m30s", "59.977s", "20ms", "2h0m0s"): number-unit pairs, longest units tried first.
_GO_DURATION = r"(?:\d+(?:\.\d+)?(?:ms|us|µs|ns|h|m|s))+"
_TRY_AGAIN = re.compile(rf"try again in ({_GO_DURATION})\b", re.IGNORECASE)
_PAIR = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_RETRY_AFTER_WORDS = re.compile(
    r"(?:retry after|try again in) (\d+(?:\.\d+)?) ?(?:seconds?|secs?)\b", re.IGNORECASE
)


def retry_after_s(
    headers: Mapping[str, str] | None, body: str | None, now: Callable[[], datetime] | None = None
) -> float | None:
    """Seconds the provider asks to wait before the next attempt, or None when it names no wait
    (``now``: the clock an HTTP date is measured against, for tests)."""
    if headers:
        lowered = {str(key).lower(): str(value) for key, value in headers.items()}
        for parsed in (
            _milliseconds(lowered.get("retry-after-ms")),
            _seconds_or_date(lowered.get("retry-after"), now or _utcnow),
        ):
            if parsed is not None:
                return parsed
    return _from_body(body) if body else None


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _bounded(seconds: float) -> float | None:
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, _LONGEST_S)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _milliseconds(value: str | None) -> float | None:
    number = None if value is None else _number(value.strip())
    return None if number is None else _bounded(number / 1000)


def _seconds_or_date(value: str | None, now: Callable[[], datetime]) -> float | None:
    if value is None or not value.strip():
        return None
    number = _number(value.strip())
    if number is not None:
        return _bounded(number)
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):  # not a date (the stdlib's ways of saying so)
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; an obsolete form without zone reads as such
        when = when.replace(tzinfo=UTC)
    return _bounded(max(0.0, (when - now()).total_seconds()))


def _from_body(body: str) -> float | None:
    found = _TRY_AGAIN.search(body)
    if found is not None:
        return _bounded(sum(float(number) * _UNITS_S[unit] for number, unit in _PAIR.findall(found.group(1))))
    words = _RETRY_AFTER_WORDS.search(body)
    return None if words is None else _bounded(float(words.group(1)))
