"""Which permits a call needs, and waiting for them on the run's record.

The executor asks :meth:`PermitGate.needs` once per call (one dict lookup for a call no limit
covers) and, before each attempt of a covered call, :meth:`PermitGate.acquire`. A call granted at
once writes nothing. A call that must wait has ``PermitAwaited`` recorded when the wait begins
(the first need that blocks it: what its status shows) and ``PermitGranted`` with the wait's
length when it ends -- through the callback the executor gives, which delivers them to the run.
Waiting is neither a failure nor an attempt spent: the attempt starts once it holds its permits,
and a run recovered while waiting waits again (runtime.workflow.machine: not in doubt).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from runtime.log.records.events import Event, ModelCallCompleted, PermitAwaited, PermitGranted
from runtime.worker.limits.permits import Held, LimitUnsatisfiable, Need, Permits
from runtime.worker.metrics import WorkerMetrics
from runtime.workflow.intents import Intent
from runtime.workflow.limits import Limit
from runtime.workflow.tokens import estimate_tokens

# Delivers a record of the wait to the run and appends it; False when it could not be (the run
# ended, the partition was lost, a record was not acknowledged): the call is then not made.
Note = Callable[[Event], Awaitable[bool]]
NO_NEEDS: tuple[Need, ...] = ()


class PermitGate:
    """The app's resolved limits (runtime.workflow.declared_limits) over the worker's permits."""

    def __init__(self, limits: Mapping[str, Limit], permits: Permits, metrics: WorkerMetrics) -> None:
        self.limits = dict(limits)
        self.permits = permits
        self.metrics = metrics
        # (kind, name) -> the limits covering that model or tool, in name order (the order needs
        # are acquired in, so two calls never hold each other's permits).
        covering: dict[tuple[str, str], list[Limit]] = {}
        for name in sorted(limits):
            limit = limits[name]
            for model in limit.models:
                covering.setdefault(("model", model), []).append(limit)
            for tool in limit.tools:
                covering.setdefault(("tool", tool), []).append(limit)
        self._covering = {call: tuple(found) for call, found in covering.items()}

    def needs(self, intent: Intent, limit_keys: Sequence[tuple[str, str]]) -> tuple[Need, ...]:
        """What one call of ``intent`` needs: 1 request, its estimated tokens (a model call), 1 slot,
        of each limit covering it, keyed by the run's ``limit_keys`` (RunView.limit_keys)."""
        covering = self._covering.get((intent.kind, intent.name))
        if covering is None:
            return NO_NEEDS
        keys = dict(limit_keys)
        tokens: float | None = None
        needs: list[Need] = []
        for limit in covering:
            key = keys.get(limit.name) if limit.per is not None else None
            if limit.requests_per_minute is not None:
                needs.append(Need(limit.name, key, "requests_per_minute", 1.0))
            if limit.tokens_per_minute is not None and intent.kind == "model":
                if tokens is None:
                    args = intent.args
                    tokens = float(estimate_tokens(args["messages"], dict(args.get("params") or {})))
                needs.append(Need(limit.name, key, "tokens_per_minute", tokens))
            if limit.concurrent is not None:
                needs.append(Need(limit.name, key, "concurrent", 1.0))
        return tuple(needs)

    async def acquire(self, needs: Sequence[Need], attempt: int, position: int, note: Note) -> Held | None:
        """Hold every permit of ``needs``; the waiting, if any, recorded through ``note``. None when
        a record of the wait could not be made (nothing is then held). Raises LimitUnsatisfiable for
        a need larger than its limit's whole capacity: no wait would ever admit it."""
        for need in needs:
            capacity = self.limits[need.limit].capacity(need.dimension)
            if capacity is not None and need.amount > capacity:
                raise LimitUnsatisfiable(
                    f"the call needs {need.amount:g} of {need.describe()}, more than the limit's "
                    f"{capacity:g} (app.limit({need.limit!r}) or the setting limits.{need.limit})"
                )
        blocked = self.permits.blocking(needs)
        if blocked is None:  # nearly every call: no record, no clock
            return await self.permits.acquire(needs)
        began = time.monotonic()
        awaited = PermitAwaited(
            run_id="",
            position=position,
            attempt=attempt,
            limit=blocked.limit,
            key=blocked.key,
            dimension=blocked.dimension,
            needed=round(blocked.amount),
        )
        if not await note(awaited):
            return None
        self.metrics.permit_wait(blocked.limit, blocked.dimension, None)
        try:
            held = await self.permits.acquire(needs)
        finally:
            waited = time.monotonic() - began
            self.metrics.permit_wait(blocked.limit, blocked.dimension, waited)
        granted = PermitGranted(
            run_id="",
            position=position,
            attempt=attempt,
            limit=blocked.limit,
            key=blocked.key,
            dimension=blocked.dimension,
            waited_ms=int(waited * 1000),
        )
        try:
            recorded = await note(granted)
        except (asyncio.CancelledError, Exception):  # the permits go back before the error goes on
            held.release()
            raise
        if not recorded:
            held.release()
            return None
        return held

    def settle(self, held: Held, intent: Intent, outcome: Event) -> None:
        """Correct the tokens estimate of a model call under a tokens limit from the usage it
        reported (when it reports one); before its permits are released."""
        if not isinstance(outcome, ModelCallCompleted) or outcome.input_tokens is None:
            return
        if any(
            limit.tokens_per_minute is not None for limit in self._covering.get(("model", intent.name), ())
        ):
            held.correct("tokens_per_minute", float(outcome.input_tokens + (outcome.output_tokens or 0)))
