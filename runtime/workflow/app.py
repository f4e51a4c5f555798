"""The registry of a user's workflows, models and tools: an explicit object, no global singleton."""

from __future__ import annotations

import datetime as dt
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from runtime.errors import AgentlogError
from runtime.workflow.budget import Budget
from runtime.workflow.deadlines import DeadlineError, duration_ms
from runtime.workflow.declared_limits import checked
from runtime.workflow.limits import Limit

F = TypeVar("F", bound=Callable[..., Any])


class RegistrationError(AgentlogError):
    """A workflow, model or tool was registered twice or with a bad signature."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a model or tool call is retried.

    ``attempts`` counts every try including the first; the wait before try n+1 is
    ``min(initial_backoff * multiplier**(n-1), max_backoff)`` seconds; ``timeout`` bounds one try.
    ``non_retryable`` names exception types that end the call at once (as a ``TerminalError`` does).

    A rate limit is a wait, not a failure: an attempt that fails with ``RetryLater`` (a model
    provider's 429, 503 or 529 -- ``runtime.models.errors.ModelRateLimited`` -- or a tool's own)
    does not spend ``attempts`` while the call is within ``rate_limit_patience`` seconds of its first
    attempt. The next attempt starts once the wait the provider asked for is over (``Retry-After``,
    or its body's "try again in 59.977s"; with no wait named, the backoff above, at least 1 s). That
    time is recorded in the failure record (``retry_at``), so a worker that takes the run over after
    a restart does not send it earlier. A wait that would end past the patience fails the call for
    good, its message naming the wait asked for and the patience. The default, 300 s, rides out
    per-minute limits (tokens or requests per minute: OpenAI's and Anthropic's waits are under 60 s)
    several times over, e.g. while many runs share one minute's quota, and an overload of a few
    minutes; a daily quota ("try again in 20h") fails at once with a reason instead of holding a run
    for hours. ``rate_limit_patience=0`` fails a call at its first rate limit.
    """

    attempts: int = 3
    initial_backoff: float = 0.05
    max_backoff: float = 5.0
    multiplier: float = 2.0
    timeout: float | None = 120.0
    non_retryable: tuple[type[BaseException], ...] = ()
    rate_limit_patience: float = 300.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not self.rate_limit_patience >= 0:  # NaN too
            raise ValueError(
                f"RetryPolicy.rate_limit_patience must be seconds >= 0, got {self.rate_limit_patience!r}"
            )

    def backoff(self, attempt: int) -> float:
        return float(min(self.initial_backoff * self.multiplier ** (attempt - 1), self.max_backoff))


def _is_async(fn: Callable[..., Any]) -> bool:
    """Coroutine functions, and objects whose ``__call__`` is one (model clients)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _check_heartbeat_timeout(name: str, seconds: float | None, policy: RetryPolicy) -> None:
    """A heartbeat timeout is a positive number of seconds, shorter than the attempt's whole timeout
    (one as long would never fire first)."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        raise RegistrationError(f"tool {name!r}: heartbeat_timeout must be seconds > 0, got {seconds!r}")
    if policy.timeout is not None and seconds >= policy.timeout:
        raise RegistrationError(
            f"tool {name!r}: heartbeat_timeout={seconds:g} s is not shorter than its retry timeout of "
            f"{policy.timeout:g} s, so it would never fire first; lower it or raise RetryPolicy(timeout=...)"
        )


@dataclass(frozen=True)
class ModelSpec:
    name: str
    fn: Callable[..., Any]
    retry: RetryPolicy
    is_async: bool


@dataclass(frozen=True)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    retry: RetryPolicy
    is_async: bool
    effect: bool
    key_args: tuple[str, ...] | None  # None: every argument identifies the effect
    redact: tuple[
        str, ...
    ] = ()  # arguments recorded as a hash (runtime.workflow.redact), besides secret names
    # Seconds a call may go without heartbeat() before its attempt fails (runtime.worker.heartbeats).
    heartbeat_timeout: float | None = None
    # Arguments handed to the call in this process but neither recorded nor hashed (a framework
    # unit's body and name, runtime.integrations.calls: the tool's name already says which unit).
    carried: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkflowSpec:
    name: str
    fn: Callable[..., Any]
    input_type: Any  # the annotation of the input parameter, used to reject a wrong payload shape
    budget: Budget | None = (
        None  # a run's default budget (runtime.workflow.budget); a submission may override it
    )
    deadline_ms: int | None = None  # each run's deadline, from its start (runtime.workflow.deadlines)


@dataclass
class App:
    """Workflows, model clients and tools of one application, registered by name."""

    name: str
    workflows: dict[str, WorkflowSpec] = field(default_factory=dict)
    models: dict[str, ModelSpec] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    # Deployment-wide limits on the calls of some models and tools (runtime.workflow.limits).
    limits: dict[str, Limit] = field(default_factory=dict)
    # True: a model call whose prompt, params or prompt_version changed under replay parks the
    # run (NonDeterminismDetected), as a tool call's changed arguments do. False (the default):
    # the drift is recorded (PromptDrifted) and the recorded decision served.
    strict_prompts: bool = False

    def workflow(
        self, name: str, *, budget: Budget | None = None, deadline: dt.timedelta | float | None = None
    ) -> Callable[[F], F]:
        """Register an ``async def fn(ctx, input)`` as workflow ``name``.

        The function is the run: deterministic code that reaches the world only through ``ctx``
        (``ctx.model``, ``ctx.tool``, ``ctx.sleep``, ``ctx.wait_signal``, ``ctx.now`` ...), so a
        worker can replay it from the log. The input parameter's annotation, if any, is the shape
        a submission must have (a wrong one is rejected with the reason). ``budget``: what each run
        may spend on its model unless its submission says otherwise (runtime.workflow.budget).
        ``deadline`` (a timedelta or seconds): each run is cancelled that long after its start, or at
        its submission's deadline if that is earlier (runtime.workflow.deadlines). Raises
        RegistrationError for a sync function, a wrong signature, a name taken twice or a deadline
        that is not a positive duration."""

        def register(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise RegistrationError(f"workflow {name!r} must be an async function (async def)")
            if name in self.workflows:
                raise RegistrationError(f"workflow {name!r} is registered twice")
            params = list(inspect.signature(fn, eval_str=True).parameters.values())
            if len(params) != 2:
                raise RegistrationError(f"workflow {name!r} must take (ctx, input)")
            annotation = params[1].annotation
            if budget is not None and not isinstance(budget, Budget):
                raise RegistrationError(f"workflow {name!r}: budget must be a Budget, got {budget!r}")
            try:
                deadline_ms = (
                    None if deadline is None else duration_ms(deadline, f"workflow {name!r}: deadline")
                )
            except DeadlineError as error:
                raise RegistrationError(str(error)) from None
            self.workflows[name] = WorkflowSpec(
                name, fn, None if annotation is inspect.Parameter.empty else annotation, budget, deadline_ms
            )
            return fn

        return register

    def model(self, name: str, *, retry: RetryPolicy | None = None) -> Callable[[F], F]:
        """Register a model client as ``name``: a callable ``fn(messages, **params)``, sync (run in
        the worker's call threads) or async. Each call is recorded; on replay the recorded answer
        is served instead of calling again. ``retry`` bounds attempts, backoff and the timeout of
        one attempt (default ``RetryPolicy()``). Raises RegistrationError for a name taken twice."""

        def register(fn: F) -> F:
            if name in self.models:
                raise RegistrationError(f"model {name!r} is registered twice")
            self.models[name] = ModelSpec(name, fn, retry or RetryPolicy(), _is_async(fn))
            return fn

        return register

    def tool(
        self,
        name: str,
        *,
        effect: bool = False,
        key_args: tuple[str, ...] | None = None,
        retry: RetryPolicy | None = None,
        redact: tuple[str, ...] = (),
        heartbeat_timeout: float | None = None,
        carried: tuple[str, ...] = (),
    ) -> Callable[[F], F]:
        """Register a tool as ``name``: a callable taking keyword arguments, sync or async.

        ``effect=True`` marks a tool that changes the world (a refund, an email): it must accept an
        ``idempotency_key`` keyword, derived from the run and the arguments (never the clock) and
        recorded before the call, to pass to the service it calls; it starts only once the worker
        has proven it still owns the run's partition. ``key_args`` names the arguments that
        identify the effect (a refund's order and amount, not a free-text reason), so a reworded
        call keeps its key. ``retry`` as for ``model``. ``redact`` names arguments that must never
        reach the log (a card number): they are recorded as a hash, as arguments named like secrets
        (api_key, authorization, password, token...) always are (runtime.workflow.redact).
        ``heartbeat_timeout``: seconds the tool may go without calling ``heartbeat(details)``
        (runtime.worker.heartbeats) before its attempt fails as timed out and is retried by
        ``retry``, without waiting for the retry policy's whole ``timeout``. Raises
        RegistrationError for a bad signature, a heartbeat_timeout that is not a positive number
        shorter than the timeout, or a name taken twice. ``carried`` (for integrations) names
        arguments the call gets that are not recorded nor matched on replay: the process's own
        handles, such as a framework unit's body."""

        def register(fn: F) -> F:
            if name in self.tools:
                raise RegistrationError(f"tool {name!r} is registered twice")
            params = inspect.signature(fn).parameters
            if effect and "idempotency_key" not in params:
                raise RegistrationError(
                    f"effecting tool {name!r} must accept an `idempotency_key` keyword argument"
                )
            if key_args is not None and not effect:
                raise RegistrationError(f"tool {name!r}: key_args only applies to effect=True tools")
            for arg in key_args or ():
                if arg not in params:
                    raise RegistrationError(f"tool {name!r}: key_args names {arg!r}, not a parameter")
            policy = retry or RetryPolicy()
            _check_heartbeat_timeout(name, heartbeat_timeout, policy)
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
            for arg in redact:
                if arg not in params and not takes_any:
                    raise RegistrationError(f"tool {name!r}: redact names {arg!r}, not a parameter")
            self.tools[name] = ToolSpec(
                name,
                fn,
                policy,
                _is_async(fn),
                effect,
                tuple(key_args) if key_args is not None else None,
                tuple(redact),
                heartbeat_timeout,
                tuple(carried),
            )
            return fn

        return register

    def limit(
        self,
        name: str,
        *,
        models: tuple[str, ...] | list[str] = (),
        tools: tuple[str, ...] | list[str] = (),
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        concurrent: int | None = None,
        per: str | None = None,
    ) -> Limit:
        """Declare a deployment-wide limit on the calls of ``models`` and ``tools``: requests per
        minute, tokens per minute (models: estimated before the call, corrected from the reported
        usage) and calls in flight at once, across every worker. Several models behind one provider
        key are one limit naming them all. ``per`` names a top-level field of the run's input (a
        tenant): each of its values gets the whole limit. A call waits for its permits; waiting is
        recorded, never a failure. The ``limits`` setting overrides capacities per deployment
        (docs/limits.md). Raises LimitError (naming it) for a limit that cannot hold or a name taken
        twice; models and tools named are checked against the app when the worker starts."""
        if name in self.limits:
            raise RegistrationError(f"limit {name!r} is declared twice")
        limit = checked(
            Limit(
                name,
                tuple(models),
                tuple(tools),
                requests_per_minute,
                tokens_per_minute,
                concurrent,
                per,
            )
        )
        self.limits[name] = limit
        return limit
