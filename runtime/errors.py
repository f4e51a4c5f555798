"""The error taxonomy: one root, terminal vs retryable, errors that carry what went wrong.

Every exception agentlog raises derives from ``AgentlogError`` (a unit test walks the package to
keep it so). The errors workflow code may catch live here, below the engine that raises them, so
any module can name them without importing the run state machine. Errors that belong to one
module's job (``ConfigError``, ``SchemaFileError``, ...) are defined beside it, under this root.
"""

from __future__ import annotations


class AgentlogError(Exception):
    """Root of every error agentlog raises on purpose."""


class TerminalError(AgentlogError):
    """Retrying will not help (bad input, a contract broken); record it and move on."""


class RetryableError(AgentlogError):
    """A transient failure; the caller's retry policy decides what happens next."""


class RetryLater(RetryableError):
    """Worth another attempt, but not before ``after_s`` seconds: a rate limit (a payment API's 429,
    a model provider's 429/503/529). ``after_s`` is the wait the service asked for, ``None`` when it
    named none (the retry policy then backs off). A retry policy rides such failures out for its
    ``rate_limit_patience`` without spending its ``attempts``; a tool raises it like any error::

        if response.status_code == 429:
            raise RetryLater(float(response.headers.get("Retry-After", 1)), "payments: 429 too many requests")
    """

    def __init__(self, after_s: float | None, reason: str) -> None:
        if after_s is not None and not after_s >= 0:  # NaN too
            raise ValueError(f"RetryLater: after_s must be a number of seconds >= 0, got {after_s!r}")
        asked = "" if after_s is None else f" (asks to wait {after_s:g} s)"
        super().__init__(f"{reason}{asked}")
        self.after_s, self.reason = after_s, reason


class CallFailed(AgentlogError):
    """A model or tool call failed for good; raised into workflow code, which may catch it."""

    def __init__(
        self, kind: str, name: str, position: int, error_type: str, message: str, attempts: int
    ) -> None:
        super().__init__(
            f"{kind} {name!r} at position {position} failed after {attempts} attempt(s): {error_type}: {message}"
        )
        self.kind, self.name, self.position = kind, name, position
        self.error_type, self.message, self.attempts = error_type, message, attempts


class NonDeterminismError(AgentlogError):
    """Workflow code and recorded history disagree; names the position and both commands."""

    def __init__(self, run_id: str, position: int, expected: str, issued: str) -> None:
        super().__init__(
            f"non-determinism in run {run_id} at position {position}: history holds {expected}, code issued {issued}"
        )
        self.run_id, self.position, self.expected, self.issued = run_id, position, expected, issued


class DecisionOutOfBounds(AgentlogError):
    """A re-decided plan left the bound its re-decide point set (``within``). Raised into workflow
    code, which may catch it and escalate its own way; uncaught, the run is parked for an
    operator -- never carried on with the out-of-bounds plan."""

    def __init__(self, position: int, replacement: str) -> None:
        super().__init__(f"re-decided plan at position {position} leaves its bound: {replacement}")
        self.position, self.replacement = position, replacement


class RunCannotGoOn(AgentlogError):
    """The worker lacks what the run needs to go on (a descriptor for a framework agent's loop):
    raised out of workflow code, the run is parked with the reason -- not failed for a lack of the
    worker's, not waited on forever -- for an operator to reset or fork once the worker has it."""


class ChildRunFailed(AgentlogError):
    """A child run (``ctx.child``) ended without a result -- failed, cancelled, or rejected by its
    worker; raised into the parent's workflow code at the await, which may catch it."""

    def __init__(self, child_run_id: str, workflow: str, status: str, error_type: str, message: str) -> None:
        super().__init__(f"child run {child_run_id} ({workflow!r}) {status}: {error_type}: {message}")
        self.child_run_id, self.workflow, self.status = child_run_id, workflow, status
        self.error_type, self.message = error_type, message
