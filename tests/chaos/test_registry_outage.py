"""The schema registry SIGKILLed: readers and cold starts go on with the schemas the project
already knows (the schema cache in the state folder); what they cannot know fails with
"schema registry at URL unreachable", never a traceback.

A private registry (its own PostgreSQL, on ports of its own) in front of the shared Kafka, so
killing it disturbs no other test.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import postgres, process, registry
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from runtime.log.schemas.serde import Serde
from support.services import agentlog
from support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

REGISTRY_PORT = 27081
POSTGRES_PORT = 27432


@pytest.fixture(scope="module")
def own_registry(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The shared Kafka with a registry (and PostgreSQL) of this module's own."""
    state = tmp_path_factory.mktemp("registry-outage")
    settings = services.model_copy(
        update={
            "state_dir": state,
            "registry_port": REGISTRY_PORT,
            "postgres_port": POSTGRES_PORT,
            "schema_registry_url": f"http://127.0.0.1:{REGISTRY_PORT}",
        }
    )
    busy = [p for p in (REGISTRY_PORT, POSTGRES_PORT) if process.port_open("127.0.0.1", p)]
    assert not busy, f"ports {busy} in use: an earlier run's registry may still be up"
    try:
        postgres.start(settings, lambda _m: None)
        registry.start(settings, lambda _m: None)
        yield settings
    finally:
        registry.stop(settings)
        postgres.stop(settings)
        shutil.rmtree(postgres.fallback_dir(settings), ignore_errors=True)


def kill_registry(settings: Settings) -> None:
    pid = registry.running_pid(settings)
    assert pid is not None, "the registry is not running"
    os.kill(pid, signal.SIGKILL)
    process.wait_until(
        registry.SERVICE,
        lambda: not process.port_open("127.0.0.1", REGISTRY_PORT),
        what="the registry's port to close",
        timeout=10,
    )


@pytest.mark.timeout(300)
def test_readers_and_cold_starts_survive_a_registry_outage(
    own_registry: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = scratch_deployment(own_registry)
    warm = start_worker(deployment, workers, tmp_path, "warm")
    warm.wait_ready(deployment.partitions)
    client = Client(deployment)
    before = client.submit("short", {"order": "before"}).run_id
    assert client.run(before).result(timeout=60) == "before"
    client.close()

    kill_registry(own_registry)
    started = time.monotonic()
    try:
        # A fresh process reads a run's status: every writer schema id comes from the cache.
        status = agentlog(deployment, "status", before, "--json")
        assert status.returncode == 0, status.stderr
        assert '"completed"' in status.stdout
        # A fresh `agentlog submit --wait`: RunSubmitted's id comes from the cache; the warm worker runs it.
        submitted = agentlog(deployment, "submit", "short", "--input", '{"order": "during"}', "--wait")
        assert submitted.returncode == 0, submitted.stderr + warm.log_tail()
        assert '"during"' in submitted.stdout
        # A cold worker: the warm one is SIGKILLed, a new process takes over and runs a new submission.
        warm.kill()
        cold = start_worker(deployment, workers, tmp_path, "cold")
        cold.wait_ready(deployment.partitions, timeout=60)
        cold_run = agentlog(deployment, "submit", "short", "--input", '{"order": "cold"}', "--wait")
        assert cold_run.returncode == 0, cold_run.stderr + cold.log_tail()
        assert '"cold"' in cold_run.stdout
        assert "unreachable" in cold.log_path.read_text(), "the cold worker said it ran on cached ids"

        # Without the cache (another state folder), the same commands fail with a clear message.
        empty = deployment.model_copy(update={"state_dir": tmp_path / "no-cache"})
        for args in (("status", before), ("submit", "short", "--input", '{"order": "x"}')):
            failed = agentlog(empty, *args)
            assert failed.returncode == 1, (args, failed.stdout, failed.stderr)
            assert f"schema registry at {own_registry.schema_registry_url} unreachable" in failed.stderr
            assert "Traceback" not in failed.stderr, failed.stderr
        assert (
            Serde(empty).warm_up() == 0
        )  # a worker's warm-up is best effort: its first record fails as above
        print(f"outage checks took {time.monotonic() - started:.1f}s")
    finally:
        registry.start(own_registry, lambda _m: None)
