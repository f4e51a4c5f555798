"""What a model endpoint's failure means for the run: worth another attempt, or not.

The adapters over the official SDKs (``runtime.models.openai``, ``runtime.models.anthropic``) turn
the SDK's exceptions into these, so the worker's retry policy decides on agentlog's taxonomy, not
on one vendor's class names. The SDKs' own retry loops are switched off (``max_retries=0``): every
attempt is agentlog's, recorded as a ``ModelCallFailed`` with its number.
"""

from __future__ import annotations

from runtime.errors import RetryableError, TerminalError

# Statuses a later attempt may get past: a request timeout, a conflict on a busy resource, a rate
# limit, and every server-side failure (5xx, Anthropic's 529 "overloaded" included).
RETRYABLE_STATUSES = frozenset({408, 409, 429})


class ModelHTTPError(RetryableError):
    """The endpoint answered 408, 409, 429 or 5xx: worth another attempt."""


class ModelUnreachable(RetryableError):
    """No answer at all: the connection failed or the attempt timed out."""


class ModelRequestError(TerminalError):
    """The endpoint refused the request (400, 401, 403, 404, 422 ...): retrying will not help."""


def status_error(status: int, where: str, detail: str) -> ModelHTTPError | ModelRequestError:
    """The agentlog error for an HTTP ``status`` from ``where`` (the message keeps 300 characters)."""
    message = f"{status} from {where}: {detail[:300]}"
    if status in RETRYABLE_STATUSES or status >= 500:
        return ModelHTTPError(message)
    return ModelRequestError(message)
