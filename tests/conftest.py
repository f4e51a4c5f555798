"""Fixtures for every folder; the helpers they use live in tests/support.

tests/unit needs no service; tests/integration reaches the real Kafka, registry and ClickHouse;
tests/chaos kills or stops processes. A missing service fails the session: these tests never skip
because Kafka is not there. Each test that runs workers gets a deployment of its own -- fresh
topics, its own consumer group, schemas registered under its topics' subjects -- so tests cannot
see each other's runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.config import Settings
from support.kafka_clients import closed_since, live_clients
from support.secure_cluster import FIXTURE as SECURE_CLUSTER
from support.secure_cluster import SecureCluster
from support.services import drop_made_deployments, make_deployment, reach_services
from support.wait import wait_until
from support.workers import WorkerProcess

# The Kafka clusters tests start (the secure cluster, the failover cluster, private stacks) live
# minutes: without the optimising compiler a node starts on half the CPU (kafka_jvm_options).
os.environ.setdefault("AGENTLOG_KAFKA_JVM_OPTIONS", '["-XX:TieredStopAtLevel=1"]')

SERVICE_FIXTURES = {"services", "deployment", "workers"}
FOLDER_MARKERS = {"unit": "unit", "integration": "integration", "chaos": "chaos"}


# The modules that take a minute or more, started first under pytest-xdist so the suite does not
# end waiting on one of them (longest first; the rest follow in collection order, unit tests last).
SLOW_FIRST = (
    "tests/chaos/test_cluster_failover.py",
    "tests/integration/test_wheel_install.py",
    "tests/chaos/test_sink_chaos.py",
    "tests/chaos/test_ui_browser.py",
    "tests/integration/test_kafka_sasl.py",
    "tests/chaos/test_security_acl.py",
    "tests/chaos/test_security_chain.py",  # right after: the same secure cluster (support.secure_cluster)
    "tests/integration/test_kafka_tls.py",
    "tests/chaos/test_audit_runtime.py",
    "tests/chaos/test_audit_store_handoff.py",
    "tests/chaos/test_registry_outage.py",
)
# The long tier (`make test-long`, run by CI after `make test`): modules that start Kafka clusters, a
# private stack, a registry or a browser of their own, or that run at scale (a thousand runs, a 60 s
# rate window, eighteen thousand records through a killed sink). `make test` leaves them out so that
# the suite a developer runs stays within minutes on two cores; every crash test of a single worker
# or sink stays in it.
LONG = frozenset(
    {
        "tests/chaos/test_security_acl.py",
        "tests/chaos/test_security_chain.py",
        "tests/chaos/test_cluster_failover.py",
        "tests/chaos/test_step_overlap_crash.py",
        "tests/chaos/test_infra_restarts.py",
        "tests/chaos/test_registry_outage.py",
        "tests/chaos/test_ui_browser.py",
        "tests/chaos/test_sink_chaos.py",
        "tests/chaos/test_run_cache_crash.py",
        "tests/chaos/test_rate_limit_waits.py",
        "tests/integration/test_infra.py",
        "tests/integration/test_kafka_sasl.py",
        "tests/integration/test_kafka_tls.py",
        "tests/integration/test_wheel_install.py",
        "tests/integration/test_pydantic_ai_waiting.py",
        "tests/integration/test_limits.py",
    }
)

# Modules whose private services take the same fixed ports (support.stack): one xdist group, so
# they run on one worker, one after another. The collection refuses a module that brings up a
# private stack without being listed here.
SAME_PORTS = {
    "tests/integration/test_infra.py": "private-stack-ports",
    "tests/chaos/test_infra_restarts.py": "private-stack-ports",
    # One 3-node secure cluster for the security table, started once for both (support.secure_cluster).
    "tests/chaos/test_security_acl.py": "secure-cluster",
    "tests/chaos/test_security_chain.py": "secure-cluster",
}
_SECURE: list[SecureCluster] = []
_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the long marker is added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The folders and the markers agree: a test in tests/<folder> carries the folder's marker, a
    test in tests/unit asks for no service, every test marked chaos lives in tests/chaos, and a
    contract test says which backend run it belongs to (unit or integration)."""
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
        if folder == "contract" and not marks & {"unit", "integration"}:
            # A backend's class runs in `make unit` (in memory) or beside the services, never in neither.
            wrong.append(f"{item.nodeid}: a contract test marked neither unit nor integration")
        module = item.nodeid.split("::", 1)[0]
        if module in LONG:
            item.add_marker(pytest.mark.long)
        if "private_stack" in vars(getattr(item, "module", None) or object) and module not in SAME_PORTS:
            wrong.append(f"{item.nodeid}: brings up a private stack but is not in SAME_PORTS")
    root = tests.parent
    wrong.extend(
        f"{module}: listed in LONG but not there" for module in sorted(LONG) if not (root / module).is_file()
    )
    if wrong:
        raise pytest.UsageError("tests in the wrong folder:\n" + "\n".join(wrong))
    rank = {module: n for n, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: _slowness(item.nodeid, rank))  # stable: collection order within each


def _slowness(nodeid: str, rank: dict[str, int]) -> int:
    module = nodeid.split("::", 1)[0]
    if module in rank:
        return rank[module]
    return len(rank) + (1 if module.startswith("tests/unit/") else 0)


def _scope(nodeid: str) -> str:
    """The xdist work unit of a test: its module, or the group of modules sharing fixed ports."""
    module = nodeid.split("::", 1)[0]
    return SAME_PORTS.get(module, module)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test``), a module's tests stay on one worker, in order, so its
    module-scoped fixture (a recorded run, a private stack) is built once; work units go out in
    the collection order above (no reordering by test count)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def services() -> Iterator[Settings]:
    try:
        settings = reach_services()
    except AssertionError as missing:
        pytest.fail(str(missing))
    yield settings
    drop_made_deployments()


@pytest.fixture(scope="session")
def secure_cluster_handle(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    handle = SecureCluster(services, tmp_path_factory.mktemp("secure-cluster"))
    _SECURE.append(handle)
    try:
        yield handle
    finally:
        handle.down()


@pytest.fixture(scope="module")
def secure_cluster(secure_cluster_handle: SecureCluster) -> Settings:
    """The security table's 3-node secure cluster, as its admin (support.secure_cluster)."""
    return secure_cluster_handle.up()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the secure cluster once no test that follows on this worker needs it."""
    if nextitem is None or SECURE_CLUSTER not in getattr(nextitem, "fixturenames", ()):
        for handle in _SECURE:
            handle.down()


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

    def leaked() -> list[str]:
        return [
            t.name for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon
        ]

    yield
    wait_until(
        lambda: not leaked(),
        5,
        "the test's threads to end",
        detail=lambda: f"threads left behind: {leaked()}",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def no_kafka_client_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a Kafka client open (librdkafka's threads are native, so the thread
    check above cannot see them): it would go on retrying brokers later tests stop, on stderr.

    Not a test that failed: its traceback holds its frames, and the clients in them, open; the
    failure is the news."""
    before = live_clients()
    yield
    if not request.node.stash.get(_CALL_FAILED, False):
        closed_since(before, "the test")


@pytest.fixture(autouse=True, scope="module")
def no_kafka_client_left_behind_by_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """The same for a module's own fixtures (a recorded run, a private cluster): torn down with
    the module, their clients are closed with them."""
    before = live_clients()
    yield
    closed_since(before, f"module {request.module.__name__}")
