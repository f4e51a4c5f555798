"""Budgets a run cannot exceed: what a run may spend on its model, and what happens when it would.

A :class:`Budget` bounds a run's cost (USD, priced from the worker's price table), its tokens (as the
provider reported them) and its model calls; any subset. A workflow declares a default
(``@app.workflow("refund", budget=Budget(max_cost=2.0))``), a submission may override it
(``Client.submit(..., budget=...)``, ``agentlog submit --max-cost``); the run's ``RunStarted``
records the one that binds it.

The run's :class:`Spend` is what its record already holds: the machine adds each
``ModelCallCompleted`` it applies (live and on replay alike, so a woken run knows what it spent).
The worker checks it before a model call starts live (runtime.worker.budgets): a call that would
start past the budget does not start, and the run fails or parks (``on_exceeded``) with a reason
naming the budget, what was used, the limit and the step. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.errors import AgentlogError
from runtime.log.records.events import ModelCallCompleted
from runtime.workflow.intents import Intent

OnExceeded = Literal["fail", "park"]
ON_EXCEEDED: tuple[OnExceeded, ...] = ("fail", "park")
# The dimensions a budget bounds, in the order a check reports them.
BudgetField = Literal["max_cost", "max_tokens", "max_model_calls"]
BUDGET_FIELDS: tuple[BudgetField, ...] = ("max_cost", "max_tokens", "max_model_calls")
# The error type of a run failed by its budget (RunFailed.error_type).
BUDGET_EXCEEDED = "BudgetExceeded"


class BudgetError(AgentlogError, ValueError):
    """A budget that cannot hold (zero, negative, not a number, unknown field); the message names the field."""


@dataclass(frozen=True)
class Budget:
    """What one run may spend: ``max_cost`` in USD, ``max_tokens`` (input and output as the provider
    reports them), ``max_model_calls``; at least one. ``on_exceeded``: the run fails (``"fail"``,
    error type ``BudgetExceeded``) or parks (``"park"``: an operator decides) when a model call
    would start past it."""

    max_cost: float | None = None
    max_tokens: int | None = None
    max_model_calls: int | None = None
    on_exceeded: OnExceeded = "fail"

    def __post_init__(self) -> None:
        if all(getattr(self, name) is None for name in BUDGET_FIELDS):
            raise BudgetError("a budget needs at least one of max_cost, max_tokens, max_model_calls")
        if self.max_cost is not None:
            _positive("max_cost", self.max_cost, integral=False)
        if self.max_tokens is not None:
            _positive("max_tokens", self.max_tokens, integral=True)
        if self.max_model_calls is not None:
            _positive("max_model_calls", self.max_model_calls, integral=True)
        if self.on_exceeded not in ON_EXCEEDED:
            raise BudgetError(f"budget on_exceeded must be 'fail' or 'park', got {self.on_exceeded!r}")

    def limit(self, name: BudgetField) -> float | None:
        value = getattr(self, name)
        return None if value is None else float(value)

    def to_json(self) -> str:
        """The budget as recorded (RunSubmitted.budget, RunStarted.budget): only the fields set."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in BUDGET_FIELDS}
        fields = {k: v for k, v in fields.items() if v is not None}
        fields["on_exceeded"] = self.on_exceeded
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Budget:
        """A recorded budget; BudgetError naming what is wrong with it."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise BudgetError(f"a budget must be a JSON object, got {text!r}: {error}") from error
        if not isinstance(value, dict):
            raise BudgetError(f"a budget must be a JSON object, got {text!r}")
        unknown = sorted(set(value) - {*BUDGET_FIELDS, "on_exceeded"})
        if unknown:
            raise BudgetError(f"a budget has no field {unknown[0]!r} (known: {', '.join(BUDGET_FIELDS)})")
        return cls(**value)

    def describe(self) -> str:
        """``max_cost 2.00 USD, max_tokens 1000; on exceeded: fail``."""
        parts = [
            f"{name} {_amount(name, v)}" for name in BUDGET_FIELDS if (v := self.limit(name)) is not None
        ]
        return f"{', '.join(parts)}; on exceeded: {self.on_exceeded}"


def _positive(name: str, value: Any, *, integral: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"budget {name} must be a number, got {value!r}")
    if integral and not isinstance(value, int):
        raise BudgetError(f"budget {name} must be a whole number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(f"budget {name} must be a finite number above 0, got {value!r}")


def _amount(name: BudgetField, value: float) -> str:
    return f"{value:.4f} USD" if name == "max_cost" else str(int(value))


@dataclass(frozen=True, slots=True)
class CallSpend:
    """One completed model call as a budget counts it: the names a price is matched by (the
    reported model, the call's ``model`` parameter, the registered name), when it completed (a
    price holds from a date), and its tokens."""

    names: tuple[str | None, ...]
    at_ms: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int


def call_names(command: Intent) -> tuple[str | None, str]:
    """The names a model call is priced by before it reports its own: its ``model`` parameter and
    its registered name (``runtime.pricing.PRICED_BY`` after ``response_model``)."""
    params = command.args.get("params") if isinstance(command.args, dict) else None
    param = params.get("model") if isinstance(params, dict) else None
    return (param if isinstance(param, str) else None), command.name


def call_spend(event: ModelCallCompleted, command: Intent) -> CallSpend:
    """What a completed model call adds to its run's spend: its usage as reported (none: 0 tokens)."""
    return CallSpend(
        (event.response_model, *call_names(command)),
        event.occurred_at,
        event.input_tokens or 0,
        event.output_tokens or 0,
        event.cached_tokens or 0,
    )


def spend_json(calls: list[CallSpend]) -> str:
    """A child's calls as its ending carries them to its parent (ChildEnded.spend)."""
    return json.dumps(
        [[list(c.names), c.at_ms, c.input_tokens, c.output_tokens, c.cached_tokens] for c in calls],
        separators=(",", ":"),
    )


def spend_from_json(text: str) -> list[CallSpend]:
    """The calls ``spend_json`` wrote."""
    return [CallSpend(tuple(names), at, i, o, c) for names, at, i, o, c in json.loads(text)]


@dataclass(slots=True)
class Spend:
    """What a run's record holds of its spending so far: its model calls, their tokens, and each
    call (to be priced by whoever holds a price table). Grown by the machine in place as it applies
    ``ModelCallCompleted`` (a step allocates no new view)."""

    budget: Budget
    model_calls: int = 0
    tokens: int = 0
    calls: list[CallSpend] = field(default_factory=list)

    def add(self, call: CallSpend) -> None:
        self.model_calls += 1
        self.tokens += call.input_tokens + call.output_tokens
        self.calls.append(call)


@dataclass(frozen=True)
class Exceeded:
    """A budget a call would exceed: which one, what was used before the call, what the call was
    estimated to add, the limit, and the step (the call's position)."""

    budget: BudgetField
    used: float
    estimate: float
    limit: float
    position: int
    model: str
    on_exceeded: OnExceeded

    def reason(self) -> str:
        """What the run's failure or parking says."""
        used, limit = _amount(self.budget, self.used), _amount(self.budget, self.limit)
        adds = _amount(self.budget, self.estimate)
        return (
            f"budget {self.budget} exceeded: used {used} of {limit}; the model call {self.model!r} at step "
            f"{self.position} (estimated {adds}) was not started"
        )


def check(
    budget: Budget,
    spend: Spend,
    cost: float,
    estimate_tokens: int,
    estimate_cost: float,
    position: int,
    model: str,
) -> Exceeded | None:
    """The first budget the call at ``position`` would exceed, or None: what the run used (``cost``
    priced by the caller from ``spend.calls``) plus the call's estimate, against each limit. A call
    that would land exactly on a limit may start."""
    checks: tuple[tuple[BudgetField, float, float], ...] = (
        ("max_cost", cost, estimate_cost),
        ("max_tokens", float(spend.tokens), float(estimate_tokens)),
        ("max_model_calls", float(spend.model_calls), 1.0),
    )
    for name, used, adds in checks:
        limit = budget.limit(name)
        if limit is not None and used + adds > limit:
            return Exceeded(name, used, adds, limit, position, model, budget.on_exceeded)
    return None
