"""The real services the integration and chaos tests reach, and one scratch deployment per test."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient

from infra.deployment import environment, scratch_deployment
from infra.topics import wanted
from runtime.config import Settings, load_settings

_QUIET = logging.getLogger("tests.support.services")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

ROOT = Path(__file__).resolve().parents[2]  # the repository the tests belong to
TESTS = ROOT / "tests"  # on the workers' PYTHONPATH: they load ``support.agent_apps:app``


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def reach_services() -> Settings:
    """The settings of the services started by `agentlog infra up`; AssertionError naming the one missing."""
    settings = load_settings()
    host, _, port = settings.bootstrap_servers.split(",")[0].rpartition(":")
    if not _reachable(host, int(port)):
        raise AssertionError(
            f"Kafka is not reachable at {settings.bootstrap_servers}: run `agentlog infra up` (make test does)"
        )
    try:
        httpx.get(f"{settings.schema_registry_url}/subjects", timeout=5).raise_for_status()
    except httpx.HTTPError as error:
        raise AssertionError(
            f"schema registry not reachable at {settings.schema_registry_url}: {error}"
        ) from error
    return settings


# The scratch deployments this test process made on the shared broker, deleted when it ends.
_MADE: list[Settings] = []


def make_deployment(base: Settings, partitions: int = 3) -> Settings:
    """Fresh topics, a consumer group and registered schemas of the deployment's own."""
    settings = scratch_deployment(base, partitions)
    _MADE.append(settings)
    return settings


def drop_made_deployments(timeout: float = 30.0) -> None:
    """Delete the topics of every deployment ``make_deployment`` made in this process. A broker kept
    up across many suite runs would otherwise gather tens of thousands of partition folders (each
    holding open files) until it fails with "Too many open files"."""
    if not _MADE:
        return
    names = [spec.name for made in _MADE for spec in wanted(made)]
    admin = AdminClient(_MADE[0].kafka_common(), logger=_QUIET)
    futures = admin.delete_topics(names, operation_timeout=timeout, request_timeout=timeout)
    for future in futures.values():
        future.exception()  # waits; a topic already gone or a broker going down leaves nothing to undo
    _MADE.clear()


def deployment_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a subprocess (worker, sink, CLI) serving ``settings`` with this checkout's code."""
    return environment(settings, f"{ROOT}{os.pathsep}{TESTS}", **extra)


def agentlog(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the ``agentlog`` CLI in a subprocess with the deployment's settings."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args],
        cwd=ROOT,
        env=deployment_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
