"""``agentlog schemas list`` with no registry to ask (before ``infra up``, in an outage): it lists
the local catalog and says on stderr that the registry is unreachable, instead of failing."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def schemas_list(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"AGENTLOG_SCHEMA_REGISTRY_URL": f"http://127.0.0.1:{closed_port()}", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", "schemas", "list", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_schemas_list_offline_shows_the_local_catalog_and_names_the_unreachable_registry() -> None:
    local = sorted(path.name for path in DEFAULT_SCHEMA_DIR.glob("*.avsc"))
    done = schemas_list("--json")
    assert done.returncode == 0, done.stderr
    assert "the registry is unreachable" in done.stderr
    assert "127.0.0.1:" in done.stderr  # names the registry it tried
    rows = json.loads(done.stdout)
    assert sorted(row["local"] for row in rows) == local
    assert {row["registry"] for row in rows} == {"unreachable"}
    assert all(row["subject"].endswith(row["local"].removesuffix(".avsc")) for row in rows)
