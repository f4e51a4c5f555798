"""A run's budget checked before each model call starts live (runtime.workflow.budget).

The run's record says what it spent: the machine adds each ``ModelCallCompleted`` it applies to the
run's ``Spend`` (tokens as reported, calls counted); here the calls are priced from the price table
the worker reads (``Settings.price_table``, the format of ``agentlog audit prices load``), and the
call about to start is counted at its estimate (runtime.workflow.tokens). Only a live call is
checked: a replayed run is served what it recorded, never re-decided under a changed price table.

A call that would start past the budget does not start: the run fails (``RunFailed``, error type
``BudgetExceeded``) or parks (``RunParked``), by the budget's ``on_exceeded``, with a reason naming
the budget, what was used, the limit and the step. That record is the decision; replay serves it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from pathlib import Path

from runtime.pricing import PriceFileError, PriceTable, read_prices
from runtime.workflow.activation import Fail, Park
from runtime.workflow.budget import (
    BUDGET_EXCEEDED,
    Budget,
    BudgetError,
    Exceeded,
    Spend,
    call_names,
    check,
)
from runtime.workflow.intents import Intent
from runtime.workflow.tokens import estimate_tokens

log = logging.getLogger("agentlog.worker")

RECHECK_SECONDS = 1.0  # how often, at most, the price table's file is looked at for a change


def binding_budget(submitted: str | None, default: Budget | None) -> tuple[str | None, str | None]:
    """The budget a new run is bound by, as ``RunStarted.budget`` records it (the submission's
    override, else the workflow's default), and None; or None and the problem that rejects the
    submission (a budget that cannot hold, naming its field)."""
    if submitted is None:
        return (None if default is None else default.to_json()), None
    try:
        return Budget.from_json(submitted).to_json(), None
    except (BudgetError, TypeError) as error:
        return None, f"bad budget: {error}"


class PriceBook:
    """The worker's price table: read at start (a file that does not parse raises PriceFileError,
    naming the row), read again when the file changes; a changed file that does not parse is
    refused with an error logged, and the table read before stays."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._table: PriceTable | None = None
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        if path is not None:
            self._stamp = _stamp(path)
            self._table = PriceTable(read_prices(path))

    def table(self) -> PriceTable | None:
        """The table in force: the file is looked at again at most every ``RECHECK_SECONDS``."""
        if self.path is None:
            return None
        now = time.monotonic()
        if now - self._checked >= RECHECK_SECONDS:
            self._checked = now
            self.reload()
        return self._table

    def reload(self) -> bool:
        """Read the file again if it changed; True if a new table is in force."""
        assert self.path is not None
        try:
            stamp = _stamp(self.path)
        except PriceFileError as error:
            log.error(
                json.dumps({"event": "price_table_refused", "path": str(self.path), "error": str(error)})
            )
            return False
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            table = PriceTable(read_prices(self.path))
        except PriceFileError as error:
            log.error(
                json.dumps({"event": "price_table_refused", "path": str(self.path), "error": str(error)})
            )
            return False
        self._table = table
        log.info(json.dumps({"event": "price_table_loaded", "path": str(self.path), "rows": len(table)}))
        return True


def _stamp(path: Path) -> tuple[int, int]:
    """What tells a changed file: its modification time and size."""
    try:
        stat = os.stat(path)
    except OSError as error:
        raise PriceFileError(f"cannot read the prices file {path}: {error}") from error
    return stat.st_mtime_ns, stat.st_size


def spent_cost(spend: Spend, table: PriceTable | None) -> float:
    """The run's calls priced by ``table`` (a call no name of which has a price counts nothing)."""
    if table is None:
        return 0.0
    total = 0.0
    for call in spend.calls:
        cost = table.cost(call.names, call.at_ms, call.input_tokens, call.output_tokens, call.cached_tokens)
        total += cost or 0.0
    return total


def _estimate_names(spend: Spend, intent: Intent) -> tuple[str | None, ...]:
    """The names a call about to start is priced by: the model its last call with the same model
    parameter and registered name reported (the provider answers as a dated model, which is
    what a price table usually names), then the call's own names."""
    own = call_names(intent)
    reported = next((c.names[0] for c in reversed(spend.calls) if c.names[1:] == own), None)
    return (reported, *own)


class BudgetGuard:
    """Checks a run's budget before a live model call starts; the activation that stops the run."""

    def __init__(self, prices: PriceBook) -> None:
        self.prices = prices

    def exceeded(self, spend: Spend, intent: Intent, now_ms: int | None = None) -> Exceeded | None:
        """The budget the model call ``intent`` would exceed if it started now, or None."""
        budget = spend.budget
        messages = intent.args.get("messages", [])
        params = intent.args.get("params") or {}
        tokens = estimate_tokens(messages, params)
        table = self.prices.table() if budget.max_cost is not None else None
        cost = estimate = 0.0
        if table is not None:
            cost = spent_cost(spend, table)
            prompt = estimate_tokens(messages, {})  # the rest of the estimate is the completion's cap
            at = now_ms if now_ms is not None else int(dt.datetime.now(dt.UTC).timestamp() * 1000)
            estimate = table.cost(_estimate_names(spend, intent), at, prompt, tokens - prompt) or 0.0
        return check(budget, spend, cost, tokens, estimate, intent.position, intent.name)

    @staticmethod
    def stop(exceeded: Exceeded) -> Fail | Park:
        """What stops the run: a failure or a park, by the budget's ``on_exceeded``."""
        if exceeded.on_exceeded == "park":
            return Park(exceeded.reason())
        return Fail(BUDGET_EXCEEDED, exceeded.reason())
