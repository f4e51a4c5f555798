"""Model prices are data: a CSV file the user edits, loaded into ``agentlog.model_prices``.

Cost is computed when ``model_calls`` is read (analytics.migrations, migration 10), so loading a
corrected file re-prices history. The file replaces the table's rows: what the file says is what
the store holds.

The file: a header, then one row per model and start date::

    model,from_date,input_per_million,output_per_million,cached_per_million
    gpt-4o-2024-08-06,2024-08-06,2.50,10.00,1.25

``model`` is the name the provider reports (``ModelCallCompleted.response_model``), or the
registered model name for calls that report none. A row holds from ``from_date`` (ISO date or
time, UTC) until the same model's next row. Prices are USD per million tokens
(``*_per_million``) or per token (``*_per_token``); cached tokens are the part of the input
served from the provider's cache, priced instead of the input price.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import TerminalError

from .errors import StoreBusyError
from .migrations import migrate
from .store import StoreLock, open_client, parse_dsn
from .tables import PRICES

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

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


def load_prices(client: Client, prices: list[Price]) -> int:
    """Replace the store's prices with ``prices``; how many rows it now holds."""
    migrate(client)
    client.command(f"TRUNCATE TABLE {PRICES}")
    if prices:
        client.insert(
            PRICES,
            [
                [p.model, p.from_date, p.input_per_token, p.output_per_token, p.cached_per_token]
                for p in prices
            ],
            column_names=["model", "from_date", "input_per_token", "output_per_token", "cached_per_token"],
        )
    return len(prices)


@contextlib.contextmanager
def writable(dsn: str) -> Iterator[Client]:
    """A client that may write to the store. An embedded store must not be held by a sink: its
    query port is read-only, and a second process opening the path would corrupt it."""
    location = parse_dsn(dsn)
    if not location.embedded:
        client = open_client(location)
        try:
            yield client
        finally:
            client.close()
        return
    lock = StoreLock(location)
    if not lock.try_acquire():
        raise StoreBusyError(
            f"the analytics store {location.path} is held by pid {lock.holder() or '?'} (a sink); loading "
            "prices writes to it: stop the sink, load, start it again (or use a ClickHouse server DSN)"
        )
    try:
        client = open_client(location)
        try:
            yield client
        finally:
            client.close()
    finally:
        lock.release()
