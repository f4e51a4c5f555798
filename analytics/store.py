"""Where the analytics store is, who may open it, and how a reader reaches it.

A ClickHouse server (``http://host:8123``) is shared: the sink writes and every CLI connects
directly. The embedded store (``chdb:///path``) is not: chDB lets one process open a path, and
does not itself stop a second one -- two processes on one path corrupt it. So agentlog keeps
the rule itself, with an exclusive ``flock`` on ``<path>.lock``:

- the sink holds the lock for its whole life, and serves read-only queries on a local port
  (``analytics.server``) that it advertises in ``<path>.sink.json`` with a random token
  (``analytics.proxy`` reads it and asks the port);
- ``agentlog audit`` first tries the lock: if it gets it, no sink runs, and it opens the store
  itself for the one query; if the lock is held, it asks the advertised port.

The lock is released by the kernel when its holder dies, so a SIGKILLed sink leaves at most a
stale endpoint file, which nobody trusts without failing to get the lock first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from .errors import StoreBusyError, StoreError
from .proxy import Endpoint, ProxyStore
from .results import QueryResult

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

# Endpoint is listed for the sink (consumers.runner), which has always found it here.
__all__ = [
    "ClientStore",
    "Endpoint",
    "QueryStore",
    "StoreLocation",
    "StoreLock",
    "connect",
    "open_client",
    "parse_dsn",
]


class QueryStore(Protocol):
    """Read-only access to the store, however it is reached."""

    def query(
        self, sql: str, parameters: Mapping[str, Any] | None = None, *, readonly: bool = False
    ) -> QueryResult: ...


@dataclass(frozen=True)
class StoreLocation:
    """A parsed DSN: an embedded chDB path, or a ClickHouse server URL."""

    dsn: str
    path: Path | None  # set for chdb:// DSNs

    @property
    def embedded(self) -> bool:
        return self.path is not None

    @property
    def lock_path(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".lock")

    @property
    def endpoint_path(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".sink.json")


def parse_dsn(dsn: str) -> StoreLocation:
    """``chdb:///abs/path`` (embedded) or ``http(s)://host:port`` (a ClickHouse server)."""
    parsed = urlparse(dsn)
    if parsed.scheme == "chdb":
        location = parsed.path if not parsed.netloc else parsed.netloc + parsed.path
        if not location or location in ("memory", ":memory:"):
            raise StoreError(
                f"DSN {dsn!r}: the embedded store needs a directory, e.g. chdb:///var/lib/agentlog/analytics"
            )
        return StoreLocation(dsn, Path(location).resolve())
    if parsed.scheme in ("http", "https") and parsed.netloc:
        return StoreLocation(dsn, None)
    raise StoreError(f"DSN {dsn!r} must be chdb:///path or http(s)://host:port")


def open_client(location: StoreLocation) -> Client:
    """A clickhouse-connect client on the store; the caller closes it (and holds the lock if embedded)."""
    import clickhouse_connect  # imported late: chDB loads a large engine

    dsn = f"chdb://{location.path}" if location.path is not None else location.dsn
    try:
        client: Client = clickhouse_connect.get_client(dsn=dsn)
    except Exception as exc:  # clickhouse-connect raises several unrelated types here
        raise StoreError(f"cannot open the analytics store {location.dsn}: {exc}") from exc
    return client


class StoreLock:
    """The exclusive right to open an embedded store path (an ``flock``, released on process death)."""

    def __init__(self, location: StoreLocation) -> None:
        self.path = location.lock_path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise StoreBusyError(
                    f"the analytics store is locked by pid {self.holder() or '?'} ({self.path}); "
                    "another sink or a long audit query holds it"
                )
            time.sleep(0.05)

    def holder(self) -> int | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class ClientStore:
    """Queries through a clickhouse-connect client (a server, or chDB opened by this process)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def query(
        self, sql: str, parameters: Mapping[str, Any] | None = None, *, readonly: bool = False
    ) -> QueryResult:
        settings = {"readonly": "2"} if readonly else None
        try:
            result = self.client.query(sql, parameters=dict(parameters or {}), settings=settings)
        except Exception as exc:
            raise StoreError(f"query failed: {exc}") from exc
        return QueryResult.from_rows(
            result.column_names, [t.name for t in result.column_types], result.result_rows
        )


@contextlib.contextmanager
def connect(dsn: str, *, wait: float = 15.0) -> Iterator[QueryStore]:
    """A read-only view of the store for one command (see the module docstring for the rule)."""
    location = parse_dsn(dsn)
    if not location.embedded:
        client = open_client(location)
        try:
            yield ClientStore(client)
        finally:
            client.close()
        return
    assert location.path is not None
    lock = StoreLock(location)
    deadline = time.monotonic() + wait
    while True:
        if lock.try_acquire():
            try:
                if not location.path.exists():
                    raise StoreError(f"no analytics store at {location.path}: run `agentlog sink` first")
                client = open_client(location)
                try:
                    yield ClientStore(client)
                finally:
                    client.close()
            finally:
                lock.release()
            return
        endpoint = Endpoint.read(location.endpoint_path)
        if endpoint is not None:
            proxy = ProxyStore(endpoint)
            if proxy.ping():
                yield proxy
                return
        if time.monotonic() >= deadline:
            raise StoreBusyError(
                f"the analytics store {location.path} is held by pid {lock.holder() or '?'}, "
                "which does not answer queries (a sink still starting, or another audit command)"
            )
        time.sleep(0.1)
