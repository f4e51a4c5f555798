"""Model prices are data: a CSV file the user edits, loaded into ``agentlog.model_prices``.

Cost is computed when ``model_calls`` is read (analytics.migrations, migration 10), so loading a
corrected file re-prices history. The file replaces the table's rows: what the file says is what
the store holds.

The file: a header, then one row per model and start date::

    model,from_date,input_per_million,output_per_million,cached_per_million
    gpt-4o-2024-08-06,2024-08-06,2.50,10.00,1.25

``model`` is matched against a call's names in order, the first with a price wins: the name the
provider reported (``ModelCallCompleted.response_model``), the call's own ``model`` parameter
(``ctx.model("chat", model="acme-small", ...)``), the registered model name. ``audit cost``
says which one matched (``priced_by``). A row holds from ``from_date`` (ISO date or
time, UTC) until the same model's next row. Prices are USD per million tokens
(``*_per_million``) or per token (``*_per_token``); cached tokens are the part of the input
served from the provider's cache, priced instead of the input price.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import TerminalError

from .errors import StoreBusyError
from .migrations import migrate
from .proxy import Endpoint, ProxyStore
from .store import StoreLocation, StoreLock, open_client, parse_dsn
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
            raise PriceFileError(f"a price row must be [model, from_date, input, output, cached], got {row!r}")
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


def load(dsn: str, rows: list[Price], *, wait: float = 15.0) -> int:
    """Replace the prices of the store at ``dsn`` with ``rows``; how many it now holds.

    A server store and an embedded store no process holds are written directly. An embedded store
    a sink holds is written by the sink itself, through its query port: a second process opening
    the path would corrupt it, and stopping the audit copy to change a price is no answer."""
    location = parse_dsn(dsn)
    if not location.embedded:
        return _load_direct(location, rows)
    lock = StoreLock(location)
    deadline = time.monotonic() + wait
    while True:
        if lock.try_acquire():
            try:
                return _load_direct(location, rows)
            finally:
                lock.release()
        endpoint = Endpoint.read(location.endpoint_path)
        if endpoint is not None:
            proxy = ProxyStore(endpoint)
            if proxy.ping():
                return proxy.load_prices([p.to_json() for p in rows])
        if time.monotonic() >= deadline:
            raise StoreBusyError(
                f"the analytics store {location.path} is held by pid {lock.holder() or '?'}, which does "
                "not answer on a query port (a sink still starting, or another audit command): try again"
            )
        time.sleep(0.1)


def _load_direct(location: StoreLocation, rows: list[Price]) -> int:
    client = open_client(location)
    try:
        return load_prices(client, rows)
    finally:
        client.close()
