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

import time
from typing import TYPE_CHECKING

# The file's format and its parsing live in runtime (runtime.pricing), where the worker reads the
# same file to price a run's budget; re-exported here for the audit commands.
from runtime.pricing import KINDS, UNITS, Price, PriceFileError, read_prices

from .errors import StoreBusyError
from .migrations import migrate
from .proxy import Endpoint, ProxyStore
from .store import StoreLocation, StoreLock, open_client, parse_dsn
from .tables import PRICES

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

__all__ = ["KINDS", "UNITS", "Price", "PriceFileError", "load", "load_prices", "read_prices"]


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
