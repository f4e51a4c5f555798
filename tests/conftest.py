"""Fixtures for every folder; the helpers they use live in tests/support.

tests/unit needs no service; tests/integration reaches the real Kafka, registry and ClickHouse;
tests/chaos kills or stops processes. A missing service fails the session: these tests never skip
because Kafka is not there. Each test that runs workers gets a deployment of its own -- fresh
topics, its own consumer group, schemas registered under its topics' subjects -- so tests cannot
see each other's runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.config import Settings
from support.services import make_deployment, reach_services
from support.workers import WorkerProcess

SERVICE_FIXTURES = {"services", "deployment", "workers"}
FOLDER_MARKERS = {"unit": "unit", "integration": "integration", "chaos": "chaos"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The folders and the markers agree: a test in tests/<folder> carries the folder's marker, a
    test in tests/unit asks for no service, and every test marked chaos lives in tests/chaos."""
    tests = Path(__file__).resolve().parent
    wrong: list[str] = []
    for item in items:
        try:
            folder = item.path.resolve().relative_to(tests).parts[0]
        except ValueError:
            continue
        marks = {mark.name for mark in item.iter_markers()}
        expected = FOLDER_MARKERS.get(folder)
        if expected is not None and expected not in marks:
            wrong.append(f"{item.nodeid}: in tests/{folder} but not marked {expected}")
        needs = SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
        if folder == "unit" and needs:
            wrong.append(f"{item.nodeid}: a unit test that uses {sorted(needs)}")
        if "chaos" in marks and folder != "chaos":
            wrong.append(f"{item.nodeid}: marked chaos but not in tests/chaos")
    if wrong:
        raise pytest.UsageError("tests in the wrong folder:\n" + "\n".join(wrong))


@pytest.fixture(scope="session")
def services() -> Settings:
    try:
        return reach_services()
    except AssertionError as missing:
        pytest.fail(str(missing))


@pytest.fixture
def deployment(services: Settings) -> Settings:
    """Fresh topics (3 partitions), a consumer group and registered schemas for one test."""
    return make_deployment(services)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Collects the worker processes a test starts and stops every one of them afterwards."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """Fail a test that leaves non-daemon threads running (they would leak into later tests)."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5
    while True:
        leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"threads left behind: {[t.name for t in leaked]}"
