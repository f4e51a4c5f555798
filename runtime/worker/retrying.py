"""What follows a failed attempt of a call, by its ``RetryPolicy``: another attempt and when, or none.

A rate limit (``RetryLater``: a model provider's 429/503/529, a tool's own) is a wait, not a
failure: it spends none of the policy's ``attempts`` while the wait it asks for ends within
``rate_limit_patience`` seconds of the call's first attempt, and the time the next attempt may start
is recorded in the failure (``retry_at``), so that a worker taking the run over waits it out too
(``runtime.workflow.retry_trail`` reads it back). Any other retryable failure backs off as it always
did (``RetryPolicy.backoff`` of the attempts it spent), and a terminal one stays terminal.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from runtime.errors import RetryLater, TerminalError
from runtime.worker.resources import lacking
from runtime.workflow.app import RetryPolicy
from runtime.workflow.intents import Intent

# A rate limit that names no wait backs off by the policy, but never quicker than this: an
# immediate retry into the same limit only spends the provider's quota.
UNNAMED_RATE_LIMIT_WAIT_S = 1.0


@dataclass
class RetryTrail:
    """A call's attempts so far, as far as retrying cares: how many were rate limits, and when the
    first started (wall-clock ms; 0 before any)."""

    rate_limited: int = 0
    first_attempt_at: int = 0

    @classmethod
    def of(cls, intent: Intent) -> RetryTrail:
        """The trail its failure records left (a run taken over), or a fresh one."""
        return cls(intent.rate_limited_attempts, intent.first_attempt_at)


@dataclass(frozen=True)
class Then:
    """What follows a failed attempt: ``final`` (none), or another after ``wait_s`` seconds.
    ``retry_at`` (ms since the epoch) is what the failure records: set for a rate limit's wait, 0
    for a backoff. ``note`` is added to the recorded message (why it is final, or the wait)."""

    final: bool
    wait_s: float = 0.0
    retry_at: int = 0
    note: str = ""

    async def wait(self, clock: Callable[[], int]) -> None:
        """Until the next attempt may start: wall-clock ``retry_at`` by ``clock``, or ``wait_s``."""
        if self.retry_at:
            await wait_until(self.retry_at, clock)
        else:
            await asyncio.sleep(self.wait_s)


FINAL = Then(final=True)


def after_failure(
    policy: RetryPolicy, error: BaseException, attempt: int, trail: RetryTrail, now_ms: int, elapsed_s: float
) -> Then:
    """What follows attempt number ``attempt`` failing with ``error`` at ``now_ms``, ``elapsed_s``
    after it started; ``trail`` learns the first attempt's start and counts a rate limit retried."""
    if trail.first_attempt_at == 0:
        trail.first_attempt_at = now_ms - round(elapsed_s * 1000)
    short_of = lacking(error)
    if short_of is not None:  # the worker's lack, not the call's verdict: tried again, whatever the policy
        return Then(
            final=False,
            wait_s=policy.backoff(max(1, attempt - trail.rate_limited)),
            note=f"; the worker was out of {short_of}: tried again once it has them",
        )
    if isinstance(error, (TerminalError, *policy.non_retryable)):
        return FINAL
    if isinstance(error, RetryLater):
        return _rate_limited(policy, error, trail, now_ms)
    spent = attempt - trail.rate_limited
    if spent >= policy.attempts:
        return FINAL
    return Then(final=False, wait_s=policy.backoff(spent))


def _rate_limited(policy: RetryPolicy, error: RetryLater, trail: RetryTrail, now_ms: int) -> Then:
    named = error.after_s is not None
    wait_s = (
        error.after_s
        if error.after_s is not None
        else max(UNNAMED_RATE_LIMIT_WAIT_S, policy.backoff(trail.rate_limited + 1))
    )
    ends = now_ms + math.ceil(wait_s * 1000)
    first = trail.first_attempt_at
    patience_ends = first + math.floor(policy.rate_limit_patience * 1000)
    if ends > patience_ends:
        asked = f"a wait of {wait_s:g} s" if named else f"a backoff of {wait_s:g} s (no wait named)"
        return Then(
            final=True,
            note=(
                f"; not retried: {asked} would end {(ends - first) / 1000:g} s after the call's first "
                f"attempt, past its retry policy's rate_limit_patience of {policy.rate_limit_patience:g} s"
            ),
        )
    trail.rate_limited += 1
    # now_ms is a floored clock reading: one ms more, so the wait is never short of what was asked.
    retry_at = ends + 1
    note = "" if named else f"; no wait named, retrying in {wait_s:g} s"
    return Then(final=False, wait_s=wait_s, retry_at=retry_at, note=note)


async def wait_until(retry_at: int, clock: Callable[[], int]) -> None:
    """Sleep until wall-clock ``retry_at`` (ms) by ``clock``, holding no thread."""
    remaining_ms = retry_at - clock()
    if remaining_ms > 0:
        await asyncio.sleep(remaining_ms / 1000)
