"""Awaitables of workflow code, driven by hand rather than by an asyncio loop.

Workflow code awaits only these. The machine resumes the coroutine when the future it is
blocked on is done, in the order history delivers results -- which is what makes replay
deterministic. Awaiting anything else (``asyncio.sleep``, a socket) is an error.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any


class DurableFuture:
    """The result of one workflow command (model/tool call, timer, signal wait)."""

    __slots__ = ("_done", "_error", "_value", "position")

    def __init__(self, position: int) -> None:
        self.position = position
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        if not self._done:
            self._done, self._value = True, value

    def set_exception(self, error: BaseException) -> None:
        if not self._done:
            self._done, self._error = True, error

    @property
    def failed(self) -> bool:
        """Done with an error (a call that failed for good, a signal wait that timed out)."""
        return self._error is not None

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def __await__(self) -> Generator[Any, None, Any]:
        if not self._done:
            yield self
        return self.result()


class GatherFuture:
    """All of several futures; results in issue order, the first error (in issue order) raised."""

    __slots__ = ("children",)

    def __init__(self, children: list[DurableFuture]) -> None:
        self.children = children

    @property
    def done(self) -> bool:
        return all(child.done for child in self.children)

    def __await__(self) -> Generator[Any, None, list[Any]]:
        if not self.done:
            yield self
        return [child.result() for child in self.children]


Blocker = DurableFuture | GatherFuture
