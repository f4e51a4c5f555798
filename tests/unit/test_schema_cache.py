"""The schema cache (runtime.log.schemas.cache): what the registry said, kept for its outages."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.log.schemas import cache as schema_cache
from runtime.log.schemas.cache import SchemaCache, cache_path
from runtime.log.schemas.registry import RegistryUnreachable, is_unreachable

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:27081"


def test_two_processes_add_to_one_file_without_losing_each_others_entries(tmp_path: Path) -> None:
    path = cache_path(tmp_path, URL)
    first, second = SchemaCache(path, URL), SchemaCache(path, URL)
    first.remember_writer("t.commands-dev.RunSubmitted", '{"a": 1}', 11, 1)
    second.remember_id(12, '{"b": 2}', "t.events-dev.RunStarted", 3)  # read before the first wrote
    fresh = SchemaCache(path, URL)
    assert fresh.writer("t.commands-dev.RunSubmitted", '{"a": 1}') == (11, 1)
    assert fresh.writer("t.commands-dev.RunSubmitted", '{"a": 2}') is None, "another text has no id"
    assert fresh.schema(11) == '{"a": 1}', "a writer's id is also readable by id"
    assert fresh.schema(12) == '{"b": 2}' and fresh.version(12, "t.events-dev.RunStarted") == 3
    assert fresh.version(12, "other-subject") is None


def test_each_registry_url_has_its_own_cache(tmp_path: Path) -> None:
    assert cache_path(tmp_path, URL) != cache_path(tmp_path, "http://127.0.0.1:8081")


def test_a_torn_or_foreign_file_is_started_afresh(tmp_path: Path) -> None:
    path = cache_path(tmp_path, URL)
    path.parent.mkdir(parents=True)
    path.write_text('{"writers": ')
    cache = SchemaCache(path, URL)
    assert cache.schema(1) is None
    cache.remember_id(1, "{}", "s", 1)
    assert SchemaCache(path, URL).schema(1) == "{}"


def test_old_ids_are_dropped_past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_cache, "MAX_IDS", 3)
    cache = SchemaCache(cache_path(tmp_path, URL), URL)
    for schema_id in range(1, 6):
        cache.remember_id(schema_id, f'{{"v": {schema_id}}}', "s", schema_id)
    fresh = SchemaCache(cache.path, URL)
    assert [fresh.schema(i) is not None for i in range(1, 6)] == [False, False, True, True, True]


def test_unreachable_means_no_answer_not_a_refusal() -> None:
    class SchemaRegistryError(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(status)
            self.http_status_code = status

    assert is_unreachable(ConnectionRefusedError(111, "refused"))
    assert is_unreachable(TimeoutError())
    assert is_unreachable(SchemaRegistryError(503))
    assert not is_unreachable(SchemaRegistryError(404))
    assert not is_unreachable(ValueError("bad schema"))
    error = RegistryUnreachable(URL, "ConnectError: refused", "RunSubmitted is not cached")
    assert (
        str(error)
        == f"schema registry at {URL} unreachable (ConnectError: refused): RunSubmitted is not cached"
    )
