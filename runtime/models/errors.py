"""What a model endpoint's failure means for the run: worth another attempt, or not.

The adapters over the official SDKs (``runtime.models.openai``, ``runtime.models.anthropic``) turn
the SDK's exceptions into these, so the worker's retry policy decides on agentlog's taxonomy, not
on one vendor's class names. The SDKs' own retry loops are switched off (``max_retries=0``): every
attempt is agentlog's, recorded as a ``ModelCallFailed`` with its number. A rate limit (429, 503,
529) is a ``ModelRateLimited`` carrying the wait the provider asked for, read from the answer's
headers and body (``runtime.models.retry_after``), which the retry policy waits out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from runtime.errors import RetryableError, RetryLater, TerminalError
from runtime.models.retry_after import retry_after_s

# Statuses a later attempt may get past: a request timeout, a conflict on a busy resource, a rate
# limit, and every server-side failure (5xx, Anthropic's 529 "overloaded" included).
RETRYABLE_STATUSES = frozenset({408, 409, 429})
# Of those, the ones that mean "too much, come back later": a rate limit, a provider overloaded
# (Anthropic's 529) or unavailable (503). They wait what the provider asks (``ModelRateLimited``).
RATE_LIMIT_STATUSES = frozenset({429, 503, 529})


class ModelHTTPError(RetryableError):
    """The endpoint answered 408, 409, 429 or 5xx: worth another attempt."""


class ModelRateLimited(ModelHTTPError, RetryLater):
    """The endpoint answered 429, 503 or 529: retry once the wait it asked for (``after_s``, None
    when it named none) is over; the retry policy rides it out for its ``rate_limit_patience``."""

    def __init__(self, after_s: float | None, message: str) -> None:
        RetryLater.__init__(self, after_s, message)


class ModelUnreachable(RetryableError):
    """No answer at all: the connection failed or the attempt timed out."""


class ModelRequestError(TerminalError):
    """The endpoint refused the request (400, 401, 403, 404, 422 ...): retrying will not help."""


def status_error(
    status: int,
    where: str,
    detail: str,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
) -> ModelHTTPError | ModelRequestError:
    """The agentlog error for an HTTP ``status`` from ``where`` (the message keeps 300 characters);
    for a rate limit, the wait the answer asks for, read from its ``headers`` or its ``body``'s text
    (``runtime.models.retry_after``; ``detail`` is read too, as SDKs put the body's message there)."""
    message = f"{status} from {where}: {detail[:300]}"
    if status in RATE_LIMIT_STATUSES:
        text = detail if body is None else f"{detail}\n{body}"
        return ModelRateLimited(retry_after_s(headers, text), message)
    if status in RETRYABLE_STATUSES or status >= 500:
        return ModelHTTPError(message)
    return ModelRequestError(message)


def body_text(body: object) -> str | None:
    """An SDK error's parsed body (``error.body``: JSON as Python, or text) as text, for
    ``status_error``; None for none."""
    if body is None or isinstance(body, str):
        return body
    return json.dumps(body, default=str)
