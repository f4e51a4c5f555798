"""The seam between a call that must wait for capacity and the capacity a deployment shares.

The executor asks ``Permits.acquire`` for what a call needs before each attempt and releases what
it got when the attempt ends; how capacity is shared between workers is the implementation's
business (one process holding every limit whole, or leases granted across the workers' group).
Waiting holds no thread: ``acquire`` is a coroutine that parks on futures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from runtime.errors import TerminalError
from runtime.workflow.limits import DIMENSION_LABELS, Dimension


class LimitUnsatisfiable(TerminalError):
    """A call needs more than its limit will ever give (a request estimated at more tokens than a
    minute's): waiting would never end, so the call fails for good, naming the limit."""


@dataclass(slots=True)
class Need:
    """``amount`` of one dimension of one limit instance: 1 request, the estimated tokens, 1 slot.
    Never changed once made (not frozen only because a frozen one costs a model call under a tokens
    limit twice as much to make, on every call)."""

    limit: str  # the declared limit's name
    key: str | None  # the value of the limit's ``per`` field in the run's input; None when not keyed
    dimension: Dimension
    amount: float
    # (instance, dimension): the pool this draws on, made once (every call under a limit looks it up)
    pool_key: tuple[str, Dimension] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        instance = self.limit if self.key is None else f"{self.limit}[{self.key}]"
        self.pool_key = (instance, self.dimension)

    @property
    def instance(self) -> str:
        """The limit instance this draws on: one per name, or per name and key."""
        return self.pool_key[0]

    def costing(self, amount: float) -> Need:
        """The same need for another amount (a model call's estimated tokens)."""
        return Need(self.limit, self.key, self.dimension, amount)

    def describe(self) -> str:
        """As a run's status shows it: ``openai requests/min``, ``payments[acme] concurrent calls``."""
        return f"{self.instance} {DIMENSION_LABELS[self.dimension]}"


class Held(Protocol):
    """Permits granted to one attempt."""

    def correct(self, dimension: Dimension, actual: float) -> None:
        """The attempt reported what it really used (tokens from the provider's usage): the
        difference from the estimate is debited or credited to the same instances."""

    def release(self) -> None:
        """The attempt ended: its concurrency slots go back. Idempotent."""


class Permits(Protocol):
    """Capacity of the declared limits, as this worker may use it."""

    async def acquire(self, needs: Sequence[Need]) -> Held:
        """Wait until every need is granted (in a fixed order, so two calls never deadlock); raises
        ``LimitUnsatisfiable`` for a need no wait can meet. Cancelling the wait takes nothing."""

    def try_acquire(self, needs: Sequence[Need]) -> Held | None:
        """Every need granted at once, without waiting (nobody queued ahead, each pool admits), or
        None and nothing taken: the path of every call under limits nowhere near, so no coroutine,
        no sorting (``needs`` come in acquiring order: runtime.worker.limits.gate)."""

    def blocking(self, needs: Sequence[Need]) -> Need | None:
        """The first need that could not be granted right now (what a run waits for), or None."""

    async def start(self) -> None:
        """Begin sharing (join the deployment's coordination); called in the worker's loop."""

    async def close(self) -> None: ...
