"""Patient, provider-aware retries as pure logic: the wait a rate-limited answer asks for
(runtime.models.retry_after), what a retry policy makes of a failed attempt
(runtime.worker.retrying), and the trail a call's failure records leave for a worker that takes
the run over (runtime.workflow.retry_trail)."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime

import pytest

from runtime.errors import CallFailed, RetryableError, RetryLater, TerminalError
from runtime.log.records.events import ModelCallFailed, ToolCallFailed
from runtime.models.errors import ModelHTTPError, ModelRateLimited, ModelRequestError, status_error
from runtime.models.retry_after import retry_after_s
from runtime.worker.retrying import RetryTrail, Then, after_failure
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent
from runtime.workflow.retry_trail import note_failure
from support.memory_harness import Harness

pytestmark = pytest.mark.unit

NOW = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)
T0 = 1_800_000_000_000  # a wall-clock ms for the policy's decisions


# ------------------------------------------------------------------ the wait a provider asks for
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "30"}, 30.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"RETRY-AFTER": " 0 "}, 0.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # milliseconds first, as the SDK reads them
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:30 GMT"}, 30.0),  # an HTTP date
        ({"Retry-After": "Wed, 21 Oct 2026 07:27:00 GMT"}, 0.0),  # a date passed: at once
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:30"}, 30.0),  # no zone: GMT, as RFC 9110 means
    ],
)
def test_retry_after_headers(headers: dict[str, str], expected: float) -> None:
    assert retry_after_s(headers, None, now=lambda: NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "soon"},
        {"Retry-After": "-5"},
        {"Retry-After": "nan"},
        {"Retry-After": "inf"},
        {"Retry-After": ""},
        {"Retry-After": "Wed, 32 Foo 2026 99:99:99 GMT"},
        {"retry-after-ms": "a lot"},
        {"retry-after-ms": "-1"},
        {},
    ],
)
def test_a_header_that_does_not_parse_is_ignored_not_a_crash(headers: dict[str, str]) -> None:
    assert retry_after_s(headers, None, now=lambda: NOW) is None
    # ... and the body still speaks when the header is junk
    assert retry_after_s(headers, "Please try again in 2s.", now=lambda: NOW) == 2.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000. Please try again in 59.977s. Visit",
            59.977,
        ),
        ("... Please try again in 1m30s.", 90.0),
        ("... Please try again in 20ms. Visit ...", 0.02),
        ("... Please try again in 6m0s", 360.0),
        ("... Please try again in 2h4m48.5s.", 2 * 3600 + 4 * 60 + 48.5),
        ("... Please try again in 1.2s", 1.2),
        ('{"error": {"message": "Please try again in 7s.", "code": "rate_limit_exceeded"}}', 7.0),
        ("exceeded call rate limit of your current S0 pricing tier. Please retry after 3 seconds.", 3.0),
        ("Please try again in 20 seconds", 20.0),
    ],
)
def test_retry_after_in_the_body(body: str, expected: float) -> None:
    assert retry_after_s(None, body) == pytest.approx(expected)


@pytest.mark.parametrize(
    "body",
    [
        "Rate limit reached.",
        "try again in a while",
        "try again in 5 minutes-ish",
        "try again in s",
        "in 20ms",
        "",
    ],
)
def test_a_body_naming_no_wait_names_none(body: str) -> None:
    assert retry_after_s({"x-request-id": "r1"}, body) is None


def test_an_absurd_wait_is_bounded_not_an_overflow() -> None:
    assert retry_after_s({"Retry-After": "1e300"}, None) == 7 * 24 * 3600.0


# ------------------------------------------------------------------ errors that carry the wait
@pytest.mark.parametrize("status", [429, 503, 529])
def test_rate_limit_statuses_carry_their_wait(status: int) -> None:
    error = status_error(status, "https://api.example", "busy", {"Retry-After": "12"}, None)
    assert isinstance(error, ModelRateLimited) and isinstance(error, ModelHTTPError)
    assert isinstance(error, RetryLater) and error.after_s == 12.0
    assert str(error) == f"{status} from https://api.example: busy (asks to wait 12 s)"


def test_other_statuses_keep_their_taxonomy() -> None:
    assert type(status_error(500, "w", "boom")) is ModelHTTPError
    assert type(status_error(408, "w", "slow")) is ModelHTTPError
    assert type(status_error(400, "w", "bad")) is ModelRequestError


def test_a_tool_asks_for_a_wait_with_retry_later() -> None:
    error = RetryLater(2.5, "payments: 429 too many requests")
    assert isinstance(error, RetryableError) and not isinstance(error, TerminalError)
    assert str(error) == "payments: 429 too many requests (asks to wait 2.5 s)"
    assert str(RetryLater(None, "payments: 429")) == "payments: 429"
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="after_s must be a number of seconds >= 0"):
            RetryLater(bad, "x")


def test_rate_limit_patience_is_validated() -> None:
    assert RetryPolicy().rate_limit_patience == 300.0
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="rate_limit_patience must be seconds >= 0"):
            RetryPolicy(rate_limit_patience=bad)


# ------------------------------------------------------------------ the policy's decisions
def test_a_rate_limit_within_patience_retries_without_spending_attempts() -> None:
    policy = RetryPolicy(attempts=2)
    trail = RetryTrail()
    now = T0
    for attempt in range(1, 10):  # nine rate limits (270 s of waits), far past attempts=2
        then = after_failure(policy, ModelRateLimited(30.0, "429"), attempt, trail, now, 0.1)
        assert not then.final and then.wait_s == 30.0 and then.retry_at == now + 30_001 and then.note == ""
        now = then.retry_at
    assert trail.rate_limited == 9 and trail.first_attempt_at == T0 - 100
    # the attempts are still whole: an ordinary failure now is the first one spent
    then = after_failure(policy, ConnectionError("reset"), 10, trail, now, 0.0)
    assert not then.final and then.retry_at == 0 and then.wait_s == policy.backoff(1)
    assert after_failure(policy, ConnectionError("reset"), 11, trail, now, 0.0).final


def test_a_wait_ending_past_patience_is_final_and_says_why() -> None:
    policy = RetryPolicy(rate_limit_patience=120)
    trail = RetryTrail(rate_limited=2, first_attempt_at=T0)
    then = after_failure(policy, ModelRateLimited(59.977, "429 from openai"), 3, trail, T0 + 61_000, 0.0)
    assert then.final and then.retry_at == 0 and trail.rate_limited == 2
    assert then.note == (
        "; not retried: a wait of 59.977 s would end 120.977 s after the call's first attempt, "
        "past its retry policy's rate_limit_patience of 120 s"
    )
    # a daily quota fails at once
    fresh = RetryTrail()
    assert after_failure(RetryPolicy(), RetryLater(20 * 3600.0, "quota"), 1, fresh, T0, 0.0).final


def test_a_wait_ending_exactly_at_patience_is_still_waited() -> None:
    policy = RetryPolicy(rate_limit_patience=60)
    then = after_failure(policy, RetryLater(60.0, "429"), 1, RetryTrail(), T0, 0.0)
    assert not then.final and then.retry_at == T0 + 60_001


def test_a_rate_limit_naming_no_wait_backs_off_at_least_a_second() -> None:
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=4.0)
    trail = RetryTrail()
    waits = [after_failure(policy, RetryLater(None, "429"), n, trail, T0, 0.0).wait_s for n in range(1, 6)]
    assert waits == [1.0, 1.0, 2.0, 4.0, 4.0]
    then = after_failure(policy, RetryLater(None, "429"), 6, trail, T0, 0.0)
    assert then.retry_at == T0 + 4_001 and then.note == "; no wait named, retrying in 4 s"


def test_patience_zero_fails_at_the_first_rate_limit() -> None:
    then = after_failure(
        RetryPolicy(rate_limit_patience=0), RetryLater(None, "429"), 1, RetryTrail(), T0, 0.0
    )
    assert then.final and "rate_limit_patience of 0 s" in then.note


def test_terminal_stays_terminal_and_non_retryable_is_honoured() -> None:
    policy = RetryPolicy(attempts=5, non_retryable=(KeyError,))
    assert after_failure(policy, ModelRequestError("400"), 1, RetryTrail(), T0, 0.0).final
    assert after_failure(policy, KeyError("x"), 1, RetryTrail(), T0, 0.0).final

    class Refused(RetryLater, TerminalError):  # says both: terminal wins
        pass

    assert after_failure(policy, Refused(1.0, "no"), 1, RetryTrail(), T0, 0.0).final


def test_other_failures_keep_todays_backoff() -> None:
    policy = RetryPolicy()  # 3 attempts, 0.05 s then 0.1 s
    trail = RetryTrail()
    assert after_failure(policy, TimeoutError(), 1, trail, T0, 0.0) == Then(final=False, wait_s=0.05)
    assert after_failure(policy, TimeoutError(), 2, trail, T0, 0.0) == Then(final=False, wait_s=0.1)
    assert after_failure(policy, TimeoutError(), 3, trail, T0, 0.0).final


def test_then_waits_until_retry_at_by_the_wall_clock() -> None:
    async def waited() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await Then(final=False, wait_s=99.0, retry_at=T0 + 200).wait(lambda: T0)  # 0.2 s by the clock
        await Then(final=False, retry_at=T0 - 5_000).wait(lambda: T0)  # passed: at once
        return loop.time() - start

    assert 0.19 <= asyncio.run(waited()) < 1.0


# ------------------------------------------------------------------ the trail failure records leave
def _intent() -> Intent:
    return Intent(position=3, kind="model", name="planner", args={}, hash="h", future=DurableFuture(3))


def test_failure_records_leave_the_wait_and_the_rate_limits_for_a_takeover() -> None:
    intent = _intent()
    records = [
        ModelCallFailed(
            run_id="r",
            position=3,
            error_type="TimeoutError",
            error="t",
            attempt=1,
            latency_us=2_000_000,
            final=False,
            occurred_at=T0,
        ),
        ModelCallFailed(
            run_id="r",
            position=3,
            error_type="ModelRateLimited",
            error="429",
            attempt=2,
            latency_us=1_000,
            final=False,
            occurred_at=T0 + 500,
            retry_at=T0 + 30_500,
        ),
        ToolCallFailed(
            run_id="r",
            position=3,
            error_type="RetryLater",
            error="429",
            attempt=3,
            final=False,
            occurred_at=T0 + 31_000,
            retry_at=T0 + 91_000,
        ),
    ]
    for record in records:
        note_failure(intent, record)
    assert intent.first_attempt_at == T0 - 2_000  # the first attempt started its latency before
    assert intent.rate_limited_attempts == 2 and intent.not_before == T0 + 91_000
    trail = RetryTrail.of(intent)
    assert (trail.rate_limited, trail.first_attempt_at) == (2, T0 - 2_000)
    # a later failure that asks no wait clears it: the next attempt is by backoff
    note_failure(
        intent,
        ModelCallFailed(
            run_id="r", position=3, error_type="E", error="e", attempt=4, final=False, occurred_at=T0 + 92_000
        ),
    )
    assert intent.not_before == 0 and intent.rate_limited_attempts == 2


# ------------------------------------------------------------------ a worker on the in-memory log
def test_a_tool_raising_retry_later_waits_then_completes_and_past_patience_fails_naming_it() -> None:
    """attempts=1 and a tool that is rate limited once: it waits the 0.2 s it asked for and
    completes (no attempt spent); one whose wait passes the patience fails for good, and the
    workflow's CallFailed names the wait and the patience."""
    app = App("retry-later")
    calls: dict[str, list[float]] = {"charge": [], "quota": []}

    @app.tool("charge", retry=RetryPolicy(attempts=1))
    async def charge(order: str) -> str:
        calls["charge"].append(asyncio.get_running_loop().time())
        if len(calls["charge"]) == 1:
            raise RetryLater(0.2, "payments: 429")
        return f"charged {order}"

    @app.tool("quota", retry=RetryPolicy(attempts=5, rate_limit_patience=10))
    async def quota() -> str:
        calls["quota"].append(asyncio.get_running_loop().time())
        raise RetryLater(3600.0, "daily quota")

    @app.workflow("pay")
    async def pay(ctx: Context, request: dict[str, str]) -> object:
        charged = await ctx.tool("charge", order=request["order"])
        try:
            await ctx.tool("quota")
        except CallFailed as failed:
            return {"charged": charged, "error": failed.message, "attempts": failed.attempts}
        return {"charged": charged}

    async def scenario() -> tuple[str, list[ToolCallFailed]]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit("pay", {"order": "A-1"}).run_id
        status = await harness.ended(run_id)
        await harness.stop_all()
        assert status.status == "completed", status
        return status.result, [e for e in harness.events(run_id) if isinstance(e, ToolCallFailed)]

    result, failures = asyncio.run(scenario())
    assert result == {
        "charged": "charged A-1",
        "error": "daily quota (asks to wait 3600 s); not retried: a wait of 3600 s would end 3600 s after "
        "the call's first attempt, past its retry policy's rate_limit_patience of 10 s",
        "attempts": 1,
    }
    first, second = calls["charge"]
    assert second - first >= 0.2 and len(calls["quota"]) == 1
    limited, final = failures
    assert (limited.error_type, limited.final, limited.attempt) == ("RetryLater", False, 1)
    assert limited.retry_at > 0 and (final.final, final.retry_at) == (True, 0)
