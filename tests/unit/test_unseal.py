"""analytics.unseal on the in-memory log: a store's sealed cells opened for readers, wherever the
views put them (a whole cell, a JSON string, bare in a JSON text), and `erased` once the key is
destroyed -- also for an opener that had already read the key."""

from __future__ import annotations

import json

import pytest

from analytics.results import QueryResult
from analytics.unseal import OpenedStore, Opener
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.sealed_form import ERASED
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer, SealError

pytestmark = pytest.mark.unit

SETTINGS = Settings(partitions=2, seal_contents=True)


class Store:
    """A store answering one fixed result (the opener's logic is what is under test)."""

    def __init__(self, result: QueryResult) -> None:
        self.result = result

    def query(self, sql: str, parameters: object = None, *, readonly: bool = False) -> QueryResult:
        return self.result


@pytest.fixture
def log() -> MemoryLog:
    return MemoryLog(SETTINGS)


def _keys(log: MemoryLog) -> KeyStore:
    return KeyStore(log, SETTINGS.keys_topic, SETTINGS.partitions)


def test_sealed_cells_open_wherever_the_views_put_them(log: MemoryLog) -> None:
    writer = Sealer(_keys(log))
    args = writer.seal_text('{"note":"MARKER \\"q\\""}', "args", "run-1")
    content = writer.seal_text('say "hi"\nMARKER', "new_messages", "run-1")
    whole = writer.seal_text('{"a":[1,2]}', "new_messages", "run-1")
    messages = f'[{{"content":"{content}","role":"user"}},{whole}]'
    store = OpenedStore(
        Store(QueryResult(["args", "messages", "new_messages", "n"], [], [[args, messages, [content], 7]])),
        Opener(lambda: _keys(log)),
    )
    row = next(store.query("SELECT").dicts())
    assert json.loads(str(row["args"])) == {"note": 'MARKER "q"'}
    assert json.loads(str(row["messages"])) == [
        {"content": 'say "hi"\nMARKER', "role": "user"},
        {"a": [1, 2]},
    ]
    assert row["new_messages"] == ['say "hi"\nMARKER'] and row["n"] == 7


def test_a_destroyed_key_reads_erased_even_to_an_opener_that_held_it(log: MemoryLog) -> None:
    writer = Sealer(_keys(log))
    args = writer.seal_text('{"note":"MARKER"}', "args", "run-2")
    content = writer.seal_text("MARKER", "new_messages", "run-2")
    opener = Opener(lambda: _keys(log), max_age=0.0)
    assert opener.open_text(args, "args") == '{"note":"MARKER"}'
    _keys(log).destroy("run-2")  # another process's `agentlog erase`
    assert opener.open_text(args, "args") == ERASED
    assert json.loads(opener.open_text(f'[{{"content":"{content}","role":"user"}}]')) == [
        {"content": "erased", "role": "user"}
    ]


def test_a_value_sealed_as_another_field_still_opens_and_an_altered_one_raises(log: MemoryLog) -> None:
    writer = Sealer(_keys(log))
    result = writer.seal_text('"done"', "result", "run-3")
    opener = Opener(lambda: _keys(log))
    assert opener.open_text(result, "args") == '"done"'  # a column that does not name its field
    altered = result[:-6] + ("AAAA==" if not result.endswith("AAAA==") else "BBBB==")
    with pytest.raises(SealError, match="run-3"):
        opener.open_text(altered, "result")


def test_a_store_without_sealed_values_never_reads_the_keys_topic() -> None:
    def no_keys() -> KeyStore:
        raise AssertionError("the keys topic was read for plain text")

    store = OpenedStore(Store(QueryResult(["args"], [], [['{"note":"plain"}']])), Opener(no_keys))
    assert store.query("SELECT").rows == [['{"note":"plain"}']]


def test_closing_an_opener_stops_its_key_store_and_releases_what_it_read_over(log: MemoryLog) -> None:
    sealed = Sealer(_keys(log)).seal_text('"x"', "result", "run-3")
    made: list[KeyStore] = []
    released: list[bool] = []

    def keys() -> KeyStore:
        made.append(_keys(log))
        return made[-1]

    opener = Opener(keys, on_close=lambda: released.append(True))
    assert opener.open_value(sealed, "result") == '"x"'
    opener.close()
    assert made[0].closing and released == [True]


def test_an_opener_that_met_no_sealed_value_made_no_key_store() -> None:
    made: list[KeyStore] = []
    def keys() -> KeyStore:
        made.append(_keys(MemoryLog(SETTINGS)))
        return made[-1]

    opener = Opener(keys)
    assert opener.open_value("plain") == "plain"
    opener.close()
    assert made == []
