"""`make docs` in the unit suite: the site builds with --strict (a broken link, a page missing from
the nav, an unresolved API reference, a cookbook SQL block that does not run or a generated page
that fails is an error), and the pages generated from the code hold what the code has."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.services import ROOT

pytestmark = pytest.mark.unit


class _Build:
    """One `mkdocs build --strict` in a subprocess, into a folder of its own."""

    def __init__(self) -> None:
        self.site = Path(tempfile.mkdtemp(prefix="agentlog-site-"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(self.site)],
            cwd=ROOT,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        atexit.register(self.discard)

    def wait(self) -> tuple[int, str]:
        _, stderr = self.proc.communicate(timeout=180)
        return self.proc.returncode, stderr

    def discard(self) -> None:
        if self.proc.poll() is None:  # collected but never waited for (--collect-only, -k elsewhere)
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.site, ignore_errors=True)


# Started when this module is collected, so the build (a child process, on the other core) runs
# beside the rest of the unit suite and the fixture below only waits for it. Under xdist only the
# first worker starts one early; another worker that gets these tests builds when it needs to.
_EARLY = _Build() if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0" else None


@pytest.fixture(scope="module")
def site() -> Path:
    build = _EARLY or _Build()
    returncode, stderr = build.wait()
    assert returncode == 0, stderr[-4000:]
    assert "WARNING" not in stderr, stderr[-4000:]
    return build.site


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    for page in ("getting-started", "writing-agents", "concepts", "audit", "producers", "reference/cli"):
        assert (site / page / "index.html").is_file(), page


def test_the_cli_page_lists_every_command(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text()
    for command in (
        "agentlog worker",
        "agentlog audit call",
        "agentlog infra up",
        "agentlog ui",
        "--respawn",
    ):
        assert command in page, command


def test_the_settings_page_lists_every_setting(site: Path) -> None:
    from runtime.config import Settings

    page = (site / "reference" / "settings" / "index.html").read_text()
    for name in Settings.model_fields:
        assert f"AGENTLOG_{name.upper()}" in page, name


def test_the_audit_page_lists_every_table_and_view_the_migrations_make(site: Path) -> None:
    page = (site / "audit" / "index.html").read_text()
    for name in (
        "events",
        "runs",
        "model_calls",
        "tool_calls",
        "divergences",
        "history_size",
        "prompt_drift",
    ):
        assert f"<code>{name}</code>" in page, name
    assert "<code>cost_usd</code>" in page  # a column of model_calls, listed from the store itself


def test_snippets_show_the_example_programs(site: Path) -> None:
    page = (site / "writing-agents" / "index.html").read_text()
    assert "idempotency_key" in page and "--8&lt;--" not in page and "[start:" not in page


def test_the_api_page_is_rendered_from_the_docstrings(site: Path) -> None:
    page = (site / "reference" / "python" / "index.html").read_text()
    for name in ("App", "Context", "Client", "run_local", "Settings"):
        assert f'id="runtime.{name}"' in page, name
