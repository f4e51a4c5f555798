"""State an agentlog integration keeps for each PydanticAI agent run, let go with the run."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerRun(Generic[T]):
    """One ``T`` for each agent run, made by ``make`` on first use; held weakly by the run object,
    so it goes when the run does."""

    __slots__ = ("_by_run", "_make")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._by_run: weakref.WeakKeyDictionary[object, T] = weakref.WeakKeyDictionary()

    def of(self, run: object) -> T:
        kept = self._by_run.get(run)
        if kept is None:
            kept = self._by_run[run] = self._make()
        return kept
