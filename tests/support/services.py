"""The real services the integration and chaos tests reach, and one scratch deployment per test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from infra.deployment import environment, scratch_deployment
from runtime.config import Settings, load_settings

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


def make_deployment(base: Settings, partitions: int = 3) -> Settings:
    """Fresh topics, a consumer group and registered schemas of the deployment's own."""
    return scratch_deployment(base, partitions)


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
