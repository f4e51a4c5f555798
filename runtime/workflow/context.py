"""What workflow code sees: the only door to models, tools, time, randomness and signals."""

from __future__ import annotations

import datetime as dt
import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from runtime.errors import AgentlogError, DecisionOutOfBounds
from runtime.workflow.app import App
from runtime.workflow.canonical import NAMESPACE, canonical_json, sha256_hex
from runtime.workflow.children import ChildHandle, ParentClose
from runtime.workflow.exposed import Exposed
from runtime.workflow.futures import DurableFuture, GatherFuture


class RunHost(Protocol):
    """What a Context needs of the run behind it: the run machine
    (:class:`runtime.workflow.machine.RunMachine`) provides it, and imports this module -- never the
    other way round, so the context is read and tested without the machine."""

    run_id: str
    workflow: str
    app: App
    dry_run: bool  # a fork: effecting tools are recorded as skipped
    now_ms: int  # occurred_at of the event that last resumed the workflow
    resumed_seq: int  # seq of that event
    history_warn_events: int
    exposed: Exposed  # what ctx.expose set (runtime.workflow.exposed)
    replaying: bool  # the code re-runs recorded history (what it exposes now was published before)

    def issue_model(
        self, name: str, messages: list[dict[str, Any]], params: dict[str, Any], prompt_version: str | None
    ) -> DurableFuture: ...

    def issue_tool(
        self, name: str, args: dict[str, Any], *, key: str | None = None, compensates: int | None = None
    ) -> DurableFuture: ...

    def issue_compensable_tool(
        self, name: str, args: dict[str, Any], compensate_with: tuple[str, dict[str, Any]]
    ) -> DurableFuture:
        """An effect issued with the call that undoes it (runtime.workflow.compensation)."""
        ...

    def issue_timer(self, duration_ms: int) -> DurableFuture: ...

    def issue_signal_wait(self, name: str, timeout_ms: int | None) -> DurableFuture: ...

    def issue_child(self, workflow: str, input: Any, parent_close: str) -> ChildHandle:
        """A child run started (runtime.workflow.children)."""
        ...

    def overrides_now(self) -> dict[str, Any]: ...

    def patched(self, change_id: str) -> bool: ...

    def note_redecided(
        self, position: int, original: Any, check: Any, replacement: Any, reason: str
    ) -> None: ...


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new``; ends the run and starts a fresh one with ``input``."""

    def __init__(self, input: Any) -> None:
        super().__init__("continue as new")
        self.input = input


class Context:
    """Per-run API for workflow code. Every method is deterministic under replay."""

    def __init__(self, machine: RunHost) -> None:
        self._machine = machine
        # Seeded from the run: replay draws the same numbers in the same order. Made at the first
        # draw: a generator's state is 2.5 KB, most of a waiting run's memory, and most runs never draw.
        self._random: _random.Random | None = None
        self._uuid_count = 0

    @property
    def run_id(self) -> str:
        return self._machine.run_id

    @property
    def workflow(self) -> str:
        return self._machine.workflow

    def model(
        self,
        name: str,
        /,
        *,
        messages: list[dict[str, Any]],
        prompt_version: str | None = None,
        **params: Any,
    ) -> DurableFuture:
        """Call the model client registered as ``name``; the completion is recorded."""
        return self._machine.issue_model(name, messages, params, prompt_version)

    @property
    def overrides(self) -> dict[str, Any]:
        """What ``agentlog fork RUN --at N --set key=value`` asked this run to change (``model``,
        ``prompt_version``, ...), from position N on (before it, the fork replays the original's
        calls: empty there, and in a run that is not a fork). The workflow applies them itself,
        e.g. ``ctx.model(ctx.overrides.get("model", "planner"), ...)``."""
        return self._machine.overrides_now()

    @property
    def is_fork(self) -> bool:
        """True in a fork: effecting tools are recorded as skipped and never called."""
        return self._machine.dry_run

    def tool(
        self, name: str, /, *, compensate_with: tuple[str, dict[str, Any]] | None = None, **args: Any
    ) -> DurableFuture:
        """Call the tool registered as ``name`` with keyword arguments; the result is recorded.

        ``compensate_with=(tool, {arguments})``, for an effecting tool: the effect that undoes this
        one, called if a later step fails or the run is cancelled (runtime.workflow.compensation)."""
        if compensate_with is None:
            return self._machine.issue_tool(name, args)
        return self._machine.issue_compensable_tool(name, args, compensate_with)

    def expose(self, name: str, value: Any) -> None:
        """Expose ``value`` (JSON-able) under ``name`` to queries (``Client.query(run_id, name)``,
        ``agentlog query``): the latest value per name is read at once, without waiting for the run
        or signalling it. Not recorded: replay exposes the same values (runtime.workflow.exposed)."""
        self._machine.exposed.set(name, value, live=not self._machine.replaying)

    def sleep(self, seconds: float) -> DurableFuture:
        """A durable timer: survives worker restarts; holds no thread while it waits."""
        return self._machine.issue_timer(int(seconds * 1000))

    def wait_signal(self, name: str, timeout: float | None = None) -> DurableFuture:
        """The payload of the next signal ``name``; raises TimeoutError after ``timeout`` seconds."""
        return self._machine.issue_signal_wait(name, None if timeout is None else int(timeout * 1000))

    def start_child(
        self, workflow: str, input: Any = None, *, parent_close: ParentClose = "cancel"
    ) -> ChildHandle:
        """Start a run of ``workflow`` as a child of this one: a handle to await later (its result;
        a child that fails, is cancelled or rejected raises ``ChildRunFailed`` naming it), to
        ``signal`` or to ``cancel``. The child has its own history and partition; its id derives
        from this run and the call's position, so a replayed or recovered parent starts it once.
        ``parent_close``: what the child does if this run ends first -- "cancel" (a cancel naming
        this run is sent to it) or "run_on". An unregistered workflow, or an input that does not
        fit it, raises TerminalError here."""
        return self._machine.issue_child(workflow, input, parent_close)

    def child(self, workflow: str, input: Any = None, *, parent_close: ParentClose = "cancel") -> ChildHandle:
        """``await ctx.child("refund", input)``: start a child run and wait for its result (see
        ``start_child``). Several at once: ``await ctx.gather(ctx.child(...), ctx.child(...))``."""
        return self.start_child(workflow, input, parent_close=parent_close)

    def gather(self, *calls: Awaitable[Any]) -> GatherFuture:
        """Wait for several calls issued in parallel; results come back in issue order."""
        children = []
        for call in calls:
            if not isinstance(call, DurableFuture):
                raise TypeError(
                    "ctx.gather takes the results of ctx.model/ctx.tool/ctx.sleep/ctx.wait_signal/ctx.child"
                )
            children.append(call)
        return GatherFuture(children)

    async def redecide(
        self,
        decision: Any,
        /,
        *,
        check: str,
        model: str,
        messages: list[dict[str, Any]],
        check_args: dict[str, Any] | None = None,
        within: Callable[[Any], bool] | None = None,
        prompt_version: str | None = None,
        **params: Any,
    ) -> Any:
        """A re-decide point: keep ``decision`` while it is still valid; ask ``model`` again only
        if it is not.

        Put it where a recorded decision is about to be acted on and the world may have moved
        since (a wait, a crash and a late recovery). ``check`` names a registered read-only tool,
        called as ``check(decision=..., **check_args)``; it returns a bool or ``{"valid": bool,
        "reason": str}``. It is a lookup, recorded like any tool call, never a model call. Only
        when it says invalid is ``model`` asked again (``messages`` plus a note naming the stale
        decision and why), and a ``Redecided`` event records the original, the check and the
        replacement. ``within`` bounds the new plan (same goal, budget and tools): a replacement
        it refuses raises ``DecisionOutOfBounds`` -- the run is parked unless the code catches it.
        Replay serves the recorded check and replacement, so the run stays one story.
        """
        spec = self._machine.app.tools.get(check)
        if spec is None or spec.effect:
            known = sorted(name for name, tool in self._machine.app.tools.items() if not tool.effect)
            raise AgentlogError(
                f"re-decide check {check!r} must be a registered read-only tool (known: {known})"
            )
        args = dict(check_args or {})
        verdict = await self.tool(check, decision=decision, **args)
        valid, reason = _verdict(verdict)
        if valid:
            return decision
        note = {
            "role": "user",
            "content": (
                f"Your earlier decision {canonical_json(decision)} is no longer valid: {reason}. "
                "Decide again, for the same goal, within the same budget and tools."
            ),
        }
        asked = self.model(model, messages=[*messages, note], prompt_version=prompt_version, **params)
        replacement = await asked
        in_bounds = within is None or bool(within(replacement))
        self._machine.note_redecided(
            asked.position,
            original=decision,
            check={"tool": check, "args": args, "verdict": verdict},
            replacement=replacement,
            reason=reason if in_bounds else f"{reason}; the replacement leaves its bound: escalated",
        )
        if not in_bounds:
            raise DecisionOutOfBounds(asked.position, canonical_json(replacement))
        return replacement

    def patched(self, change_id: str) -> bool:
        """True on runs that take the new code path; in-flight runs recorded before it keep the old.

        The decision is taken where this is called: history holding another command at this
        position means the run was recorded before the marker (False, nothing recorded); else a
        ``PatchRecorded`` is written (True). A run that waits (a signal) *before* the call reaches
        it live and takes the new branch; to keep such runs on the path they started on, call it
        before the run's first command and branch on the value later. ``agentlog upgrade check``
        lists the markers in-flight runs still need ("patches still needed")."""
        return self._machine.patched(change_id)

    def now(self) -> dt.datetime:
        """Time of the event that last resumed the workflow (recorded, so replay sees the same)."""
        return dt.datetime.fromtimestamp(self._machine.now_ms / 1000, tz=dt.UTC)

    def uuid(self) -> _uuid.UUID:
        """A UUID derived from the run and a counter: the same on every replay."""
        self._uuid_count += 1
        return _uuid.uuid5(NAMESPACE, f"{self.run_id}/uuid/{self._uuid_count}")

    def random(self) -> float:
        """A float in [0, 1) from a generator seeded by the run id."""
        if self._random is None:
            self._random = _random.Random(sha256_hex(self._machine.run_id))
        return self._random.random()

    def history_events(self) -> int:
        """How many events the run's history held when the workflow last resumed (the seq of the
        event that resumed it): recorded, so replay sees the same number at the same point."""
        return self._machine.resumed_seq

    def history_near_limit(self) -> bool:
        """True once the history is past the worker's warn threshold (``history_warn_events``):
        time to carry the state into a fresh run with ``continue_as_new`` before the limit parks it.
        Derived from ``history_events()``, so a replay takes the same branch (as long as the
        threshold is not changed under a run in flight)."""
        return self._machine.resumed_seq >= self._machine.history_warn_events

    def continue_as_new(self, input: Any) -> None:
        """End this run and carry ``input`` into a fresh run of the same workflow."""
        raise ContinueAsNew(input)


def _verdict(answer: Any) -> tuple[bool, str]:
    """A check's answer: a bool, or ``{"valid": bool, "reason": str}``."""
    if isinstance(answer, dict) and "valid" in answer:
        return bool(answer["valid"]), str(answer.get("reason") or "the check said it is no longer valid")
    return bool(answer), "the check said it is no longer valid"
