"""Model prices: the CSV file a user edits (the format of ``agentlog audit prices load``), parsed, and
the price of a call matched in it.

The worker reads it to price a run's budget (runtime.worker.budgets); the audit store loads the same
file (analytics.prices) and prices history with the same rules in SQL (analytics migration 13).

The file: a header, then one row per model and start date::

    model,from_date,input_per_million,output_per_million,cached_per_million
    gpt-4o-2024-08-06,2024-08-06,2.50,10.00,1.25

``model`` is matched against a call's names in order, the first with a price wins: the name the
provider reported (``ModelCallCompleted.response_model``), the call's own ``model`` parameter, the
registered model name. A row holds from ``from_date`` (ISO date or time, UTC) until the same
model's next row. Prices are USD per million tokens (``*_per_million``) or per token
(``*_per_token``); cached tokens are the part of the input served from the provider's cache,
priced instead of the input price.
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import TerminalError

KINDS = ("input", "output", "cached")
UNITS = {"per_token": 1.0, "per_million": 1e-6}


class PriceFileError(TerminalError):
    """The prices file is malformed; the message names the line and the column."""


@dataclass(frozen=True)
class Price:
    model: str
    from_date: dt.datetime
    input_per_token: float
    output_per_token: float
    cached_per_token: float

    def to_json(self) -> list[Any]:
        """The row as the sink's query port takes it (``analytics.server``)."""
        return [
            self.model,
            self.from_date.isoformat(),
            self.input_per_token,
            self.output_per_token,
            self.cached_per_token,
        ]

    @classmethod
    def from_json(cls, row: list[Any]) -> Price:
        """A row sent by ``to_json``; PriceFileError naming what is wrong with it."""
        if not isinstance(row, list) or len(row) != 2 + len(KINDS):
            raise PriceFileError(
                f"a price row must be [model, from_date, input, output, cached], got {row!r}"
            )
        model, start = row[0], row[1]
        if not isinstance(model, str) or not model or not isinstance(start, str):
            raise PriceFileError(f"a price row needs a model name and an ISO from_date, got {row!r}")
        where = f"price row {model!r}"
        amounts = [_amount(str(value), where, kind, 1.0) for value, kind in zip(row[2:], KINDS, strict=True)]
        return cls(model, _date(start, where), *amounts)


def _unit(header: list[str], path: Path) -> float:
    for unit, scale in UNITS.items():
        if header == ["model", "from_date", *(f"{kind}_{unit}" for kind in KINDS)]:
            return scale
    expected = " or ".join(
        ",".join(["model", "from_date", *(f"{kind}_{unit}" for kind in KINDS)]) for unit in UNITS
    )
    raise PriceFileError(f"{path}: the header is {','.join(header)!r}; expected {expected}")


def _date(text: str, where: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise PriceFileError(f"{where}: from_date {text!r} is not an ISO-8601 date or time") from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _amount(text: str, where: str, column: str, scale: float) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise PriceFileError(f"{where}: {column} {text!r} is not a number") from exc
    if not math.isfinite(value) or value < 0:
        raise PriceFileError(f"{where}: {column} {text!r} must be a finite price >= 0")
    return value * scale


def read_prices(path: Path) -> list[Price]:
    """Every row of the prices file, checked; PriceFileError names the first bad one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PriceFileError(f"cannot read the prices file {path}: {exc}") from exc
    rows = [row for row in csv.reader(lines) if row and not row[0].lstrip().startswith("#")]
    if not rows:
        raise PriceFileError(f"{path}: empty; expected a header and one row per model")
    scale = _unit([h.strip() for h in rows[0]], path)
    prices: list[Price] = []
    seen: set[tuple[str, dt.datetime]] = set()
    for number, row in enumerate(rows[1:], start=2):
        where = f"{path}, row {number}"
        if len(row) != 2 + len(KINDS):
            raise PriceFileError(f"{where}: {len(row)} columns, expected {2 + len(KINDS)}")
        model = row[0].strip()
        if not model:
            raise PriceFileError(f"{where}: the model name is empty")
        start = _date(row[1], where)
        if (model, start) in seen:
            raise PriceFileError(f"{where}: a second price for {model!r} from {row[1].strip()}")
        seen.add((model, start))
        amounts = [_amount(text, where, kind, scale) for text, kind in zip(row[2:], KINDS, strict=True)]
        prices.append(Price(model, start, *amounts))
    return prices


# The names a call is priced by, in the order they are tried (analytics ``priced_by``).
PRICED_BY = ("response_model", "model_param", "registered_name")


class PriceTable:
    """The prices of a file, to match a call's names and time against: per model, its rows by start."""

    def __init__(self, prices: Sequence[Price]) -> None:
        rows: dict[str, list[Price]] = {}
        for price in prices:
            rows.setdefault(price.model, []).append(price)
        self._rows = {model: sorted(found, key=lambda p: p.from_date) for model, found in rows.items()}
        self._starts = {model: [p.from_date for p in found] for model, found in self._rows.items()}

    def __len__(self) -> int:
        return sum(len(found) for found in self._rows.values())

    def price(self, names: Sequence[str | None], at: dt.datetime) -> tuple[Price, int] | None:
        """The row in force at ``at`` for the first of ``names`` that has one, and that name's index
        in ``names`` (``PRICED_BY`` when they are given in its order); None if none has a price."""
        for index, name in enumerate(names):
            if not name or name not in self._starts:
                continue
            found = bisect.bisect_right(self._starts[name], at)
            if found:
                return self._rows[name][found - 1], index
        return None

    def cost(
        self,
        names: Sequence[str | None],
        at_ms: int,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
    ) -> float | None:
        """A call's cost in USD, as the audit store computes it: the uncached input at the input
        price, the cached part at the cached price, the output at the output price; None if no
        name has a price at that time."""
        matched = self.price(names, dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC))
        if matched is None:
            return None
        price = matched[0]
        return (
            (input_tokens - cached_tokens) * price.input_per_token
            + cached_tokens * price.cached_per_token
            + output_tokens * price.output_per_token
        )
