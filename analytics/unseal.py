"""Sealed contents opened on read, for the people reading the store (``agentlog audit``, the UI).

The store holds what the topics hold: with ``seal_contents``, a run's contents are
``sealed:v1:<key id>:<base64>`` (runtime.log.sealing), and they stay so in every table --
nothing here writes. A reader that renders contents for people wraps its store in
:class:`OpenedStore`: each sealed value of a result is opened with its key, read from the keys
topic through the runtime's ``KeyStore``, or shown as ``erased`` once that key is destroyed.

Where a sealed value sits in a cell:

- the whole cell (``args``, ``result``, ``input``, ``params``, each of ``new_messages``, a
  payload's ``content``): the cell becomes the plain JSON text, or ``"erased"`` (JSON text, as
  ``RunHandle.history`` reads it);
- inside a JSON string the store's views built (a message's ``content`` in ``model_calls.messages``):
  the string becomes the plain text, JSON-escaped, or ``erased``;
- bare inside a JSON text (a message stored with no role, whose whole canonical JSON was sealed):
  the plain JSON, or ``"erased"``.

The associated data of a sealed value names its record field (``<key id>/<field>``), which a
column of a view does not always carry: the column's own field is tried first, then the other
content fields. A value no field opens was altered or moved, and raises ``SealError``.

Keys are cached by the reader's opener, which the reader owns and closes (a command's
``reading`` block, the UI server's life): no opener outlives what made it, so no Kafka reader of
the keys topic is left running in a process. A long-lived reader (the UI) must notice an erasure made after it
read a key: a key is looked up again -- one incremental read of its keys partition, which sees
the tombstone -- when it was last looked up more than ``max_age`` seconds ago.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from runtime.config import Settings
from runtime.log.port.protocol import EventLog
from runtime.log.records.sealed_form import CONTENT_FIELDS, ERASED, PREFIX, key_id_of
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer, SealError

from .results import JsonValue, QueryResult
from .store import QueryStore, connect

# What an erased value reads as inside a string (a message's content): the word, not JSON text.
ERASED_WORD = "erased"
# The payloads topic's values are sealed whole, as field "payload" (runtime.log.records.payloads).
_PAYLOAD_FIELD = "payload"
FIELDS: tuple[str, ...] = (
    *dict.fromkeys(name for names in CONTENT_FIELDS.values() for name in names),
    _PAYLOAD_FIELD,
)
# Columns of the store whose name is not the record field their sealed values were sealed as.
_FIELD_OF_COLUMN = {"messages": "new_messages", "content": _PAYLOAD_FIELD}
# A sealed value inside a longer text: base64 has no colon, so the key id runs to the last colon
# before it (a subject's id may hold colons).
_TOKEN = re.compile(re.escape(PREFIX) + r'[^"\s\\]*?:[A-Za-z0-9+/]+=*(?![A-Za-z0-9+/=:])')
MAX_AGE = 2.0


class Opener:
    """Opens sealed values with the keys of one deployment's keys topic; safe across threads."""

    def __init__(
        self,
        keys: Callable[[], KeyStore],
        max_age: float = MAX_AGE,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._make_keys = keys  # called on the first sealed value: a store of plain text needs no Kafka
        self.max_age = max_age
        self._on_close = on_close  # releases what ``keys`` made the store over
        self._sealer: Sealer | None = None
        self._looked_up: dict[str, float] = {}  # key id -> when it was last read from the keys topic
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings, max_age: float = MAX_AGE) -> Opener:
        """An opener of ``settings``' keys topic over a Kafka reader of its own, made on the first
        sealed value met and closed with the opener."""
        from runtime.log.kafka.backend import KafkaLog  # a reader of the keys topic only

        made: list[EventLog] = []

        def keys() -> KeyStore:
            made.append(KafkaLog(settings))
            return KeyStore(made[-1], settings.keys_topic, settings.partitions)

        def close_made() -> None:
            for log in made:
                log.close()

        return cls(keys, max_age, on_close=close_made)

    def close(self) -> None:
        """Stop the key store's reads and release what it reads over (its Kafka reader)."""
        with self._lock:
            if self._sealer is not None:
                self._sealer.keys.close()
            if self._on_close is not None:
                self._on_close()

    def open_value(self, value: str, field: str | None = None) -> str:
        """The plain text of a sealed ``value`` (ERASED if its key is gone); other text as it is."""
        if not value.startswith(PREFIX):
            return value
        with self._lock:
            sealer = self._fresh(key_id_of(value))
            tried = (field, *(f for f in FIELDS if f != field)) if field in FIELDS else FIELDS
            for name in tried:
                try:
                    return sealer.open_text(value, name)
                except SealError:
                    continue  # sealed as another field: a view's column does not say which
        raise SealError(
            f"a sealed value under key {key_id_of(value)!r} opens as none of the content fields: "
            "altered, or sealed under another key"
        )

    def open_text(self, text: str, field: str | None = None) -> str:
        """``text`` with every sealed value in it opened (see the module docstring for where)."""
        if PREFIX not in text:
            return text
        match = _TOKEN.fullmatch(text)
        if match is not None:
            return self.open_value(text, field)
        return _TOKEN.sub(lambda m: self._replacement(m, field), text)

    def open_cell(self, value: JsonValue, column: str = "") -> JsonValue:
        """A result cell (text, or an array or map of them) with its sealed values opened."""
        if isinstance(value, str):
            return self.open_text(value, _FIELD_OF_COLUMN.get(column, column))
        if isinstance(value, list):
            return [self.open_cell(item, column) for item in value]
        if isinstance(value, dict):
            return {key: self.open_cell(item, column) for key, item in value.items()}
        return value

    def _replacement(self, match: re.Match[str], field: str | None) -> str:
        plain = self.open_value(match.group(), field)
        text = match.string
        quoted = (
            match.start() > 0
            and text[match.start() - 1] == '"'
            and text[match.end() : match.end() + 1] == '"'
        )
        if not quoted:
            return plain  # a whole message's canonical JSON, or "erased" as JSON text
        if plain == ERASED:
            return ERASED_WORD
        return json.dumps(plain, ensure_ascii=False)[1:-1]

    def _fresh(self, key_id: str) -> Sealer:
        """The sealer, with ``key_id`` read again from the keys topic if it was read over
        ``max_age`` ago (so a tombstone appended since is seen)."""
        if self._sealer is None:
            self._sealer = Sealer(self._make_keys())
        now = time.monotonic()
        last = self._looked_up.get(key_id)
        if last is None or now - last > self.max_age:
            keys = self._sealer.keys
            # One incremental read of the key's partition from where the store last stopped.
            if keys.opening_key(key_id, wait=0.0) is None:
                self._sealer.forget(key_id)  # its tombstone was read: the cached cipher must go too
            self._looked_up[key_id] = now
        return self._sealer


class OpenedStore:
    """A store whose results carry sealed contents opened (the store itself stays sealed)."""

    def __init__(self, store: QueryStore, opener: Opener) -> None:
        self.store, self.opener = store, opener

    def query(
        self, sql: str, parameters: Mapping[str, Any] | None = None, *, readonly: bool = False
    ) -> QueryResult:
        result = self.store.query(sql, parameters, readonly=readonly)
        if not any(_holds_sealed(cell) for row in result.rows for cell in row):
            return result
        rows = [
            [self.opener.open_cell(cell, column) for cell, column in zip(row, result.columns, strict=True)]
            for row in result.rows
        ]
        return QueryResult(result.columns, result.types, rows)


def _holds_sealed(value: JsonValue) -> bool:
    if isinstance(value, str):
        return PREFIX in value
    if isinstance(value, list):
        return any(_holds_sealed(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_sealed(v) for v in value.values())
    return False


def opened(store: QueryStore, opener: Opener) -> OpenedStore:
    """``store`` with its sealed contents opened by ``opener``."""
    return OpenedStore(store, opener)


@contextlib.contextmanager
def reading(dsn: str, settings: Settings) -> Iterator[QueryStore]:
    """``analytics.store.connect`` for a reader that shows contents to people: opened on read."""
    opener = Opener.of(settings)
    try:
        with connect(dsn) as store:
            yield opened(store, opener)
    finally:
        opener.close()
