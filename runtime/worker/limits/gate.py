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
from runtime.worker.limits.local import acquiring_order
from runtime.worker.limits.permits import Held, LimitUnsatisfiable, Need, Permits
from runtime.worker.metrics import WorkerMetrics
from runtime.workflow.intents import Intent
from runtime.workflow.limits import Limit
from runtime.workflow.tokens import estimate_from_size, estimate_tokens

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
        # A call whose limits are neither keyed nor counting tokens needs the same permits every
        # time: made once, in acquiring order. Models under a tokens limit: their usage corrects it.
        self._fixed: dict[tuple[str, str], tuple[Need, ...]] = {}
        for call, found in self._covering.items():
            if not any(limit.per is not None or _counts_tokens(limit, call[0]) for limit in found):
                self._fixed[call] = _ordered(_needs_of(found, call[0], {}, 0.0))
        # A model under one tokens limit and no keyed one: its needs but for the tokens amount.
        self._tokens_template: dict[str, tuple[tuple[Need, ...], int]] = {}
        for (kind, name), found in self._covering.items():
            counting = [limit for limit in found if _counts_tokens(limit, kind)]
            if len(counting) == 1 and all(limit.per is None for limit in found):
                template = _ordered(_needs_of(found, kind, {}, 0.0))
                at = next(i for i, need in enumerate(template) if need.dimension == "tokens_per_minute")
                self._tokens_template[name] = (template, at)
        self._token_models = frozenset(
            name
            for (kind, name), found in self._covering.items()
            if any(_counts_tokens(lim, kind) for lim in found)
        )

    def needs(self, intent: Intent, limit_keys: Sequence[tuple[str, str]]) -> tuple[Need, ...]:
        """What one call of ``intent`` needs, in acquiring order: 1 request, its estimated tokens (a
        model call), 1 slot, of each limit covering it, keyed by the run's ``limit_keys``
        (RunView.limit_keys)."""
        call = (intent.kind, intent.name)
        fixed = self._fixed.get(call)
        if fixed is not None:
            return fixed
        covering = self._covering.get(call)
        if covering is None:
            return NO_NEEDS
        tokens = 0.0
        if intent.kind == "model" and intent.name in self._token_models:
            args = intent.args
            params = args.get("params") or {}
            tokens = float(
                estimate_from_size(intent.size, params)
                if intent.size
                else estimate_tokens(args["messages"], params)
            )
            unkeyed = self._tokens_template.get(intent.name)
            if unkeyed is not None:  # the fixed needs with this call's tokens in their place
                template, at = unkeyed
                return (*template[:at], template[at].costing(tokens), *template[at + 1 :])
        return _ordered(_needs_of(covering, intent.kind, dict(limit_keys), tokens))

    def try_now(self, needs: Sequence[Need]) -> Held | None:
        """The permits of ``needs`` if every one is free now (nearly every call: nothing recorded,
        no coroutine); None: wait for them through ``acquire``."""
        return self.permits.try_acquire(needs)

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
        if (
            isinstance(outcome, ModelCallCompleted)
            and outcome.input_tokens is not None
            and intent.name in self._token_models
        ):
            held.correct("tokens_per_minute", float(outcome.input_tokens + (outcome.output_tokens or 0)))


def _counts_tokens(limit: Limit, kind: str) -> bool:
    return limit.tokens_per_minute is not None and kind == "model"


def _needs_of(covering: Sequence[Limit], kind: str, keys: Mapping[str, str], tokens: float) -> list[Need]:
    needs: list[Need] = []
    for limit in covering:
        key = keys.get(limit.name) if limit.per is not None else None
        if limit.requests_per_minute is not None:
            needs.append(Need(limit.name, key, "requests_per_minute", 1.0))
        if _counts_tokens(limit, kind):
            needs.append(Need(limit.name, key, "tokens_per_minute", tokens))
        if limit.concurrent is not None:
            needs.append(Need(limit.name, key, "concurrent", 1.0))
    return needs


def _ordered(needs: list[Need]) -> tuple[Need, ...]:
    return tuple(sorted(needs, key=acquiring_order))
