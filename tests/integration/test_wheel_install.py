"""agentlog installed from a wheel, not from this checkout, works: it installs the product's
packages and nothing else, the packaged schemas and migrations load, `agentlog schemas list`
reaches the registry, and a workflow runs in-process with run_local.

The wheel is built from the repository and installed WITHOUT -e into a fresh venv (no system
site-packages; dependencies from the package index, by uv, which links what its cache holds rather
than unpacking every wheel again); every command then runs
from a scratch folder with no PYTHONPATH, so nothing can be imported from the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from analytics.migrations import RELEASED
from runtime.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # a cold cache downloads chdb

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_COUNT = len(list((ROOT / "schemas").glob("*.avsc")))  # every schema of the checkout ships
# What the wheel puts at the top of site-packages: the product. Not examples (the repository's, run
# from a checkout) and no generic `schemas` (the .avsc files ship inside runtime).
PRODUCT_PACKAGES = ["analytics", "consumers", "infra", "runtime", "ui"]
_NOT_SOURCE = (
    ".git",
    ".venv",
    ".agentlog",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "tests",
)


@dataclass(frozen=True)
class Installed:
    venv: Path
    workdir: Path  # outside the repository: the current folder is on sys.path for `python -c`

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return {**env, **extra}

    def run(self, *args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.workdir,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _check(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel-install")
    source, wheels, workdir = base / "src", base / "dist", base / "work"
    workdir.mkdir()
    # Built from a copy: setuptools reuses the source tree's build/ folder, where a module deleted
    # since the last build would still be found and packed.
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    # uv builds in an isolated environment as pip does, from its cache of the build backend
    # (seconds, where pip's fresh build environment takes half a minute).
    build = subprocess.run(
        [sys.executable, "-m", "uv", "build", "-q", "--wheel", "-o", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("agentlog-*.whl")
    # No pip in it: uv installs into it from outside (pip's own install is most of a venv's creation).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=120)
    target = Installed(base / "venv", workdir)
    _check(target.run(sys.executable, "-m", "uv", "pip", "install", "-q", "--python", target.python, wheel))
    return target


def test_the_installed_package_is_not_the_checkout(installed: Installed) -> None:
    out = _check(installed.run(installed.python, "-c", "import runtime; print(runtime.__file__)"))
    assert Path(out.strip()).is_relative_to(installed.venv), out
    assert not Path(out.strip()).is_relative_to(ROOT)


def test_the_wheel_installs_the_products_packages_only(installed: Installed) -> None:
    """Read from what pip recorded (RECORD, top_level.txt), not from site-packages, which holds the
    dependencies' packages too."""
    out = _check(
        installed.run(
            installed.python,
            "-c",
            "import json; from importlib.metadata import distribution; d = distribution('agentlog');"
            "print(json.dumps([sorted({f.parts[0] for f in d.files if f.parts[0] != '..'"
            " and not f.parts[0].endswith('.dist-info')}), sorted(d.read_text('top_level.txt').split())]))",
        )
    )
    installed_tops, top_level = json.loads(out)
    assert installed_tops == PRODUCT_PACKAGES
    assert top_level == PRODUCT_PACKAGES


def test_the_demo_says_it_runs_from_a_checkout(installed: Installed) -> None:
    """`demo` is listed and loads (its registrar is the product's); the examples it runs are not installed."""
    listing = installed.run(installed.venv / "bin" / "agentlog", "--help")
    assert "demo" in _check(listing) and "cannot load" not in listing.stderr, listing.stderr
    done = installed.run(installed.venv / "bin" / "agentlog", "demo")
    assert done.returncode == 1, done
    assert done.stderr.startswith("agentlog: agentlog demo runs examples.demo of a checkout"), done.stderr


def test_the_packaged_migrations_load(installed: Installed) -> None:
    out = _check(
        installed.run(
            installed.python,
            "-c",
            "import json; from analytics import migrations;"
            "print(json.dumps([migrations.__file__, [m.sha256 for m in migrations.RELEASED]]))",
        )
    )
    where, digests = json.loads(out)
    assert Path(where).is_relative_to(installed.venv)
    assert digests == [m.sha256 for m in RELEASED]  # the checkout's files, byte for byte


def test_the_packaged_schema_catalog_loads(installed: Installed) -> None:
    out = _check(
        installed.run(
            installed.python,
            "-c",
            "import json; from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, load_catalog, load_policy;"
            "print(json.dumps([str(DEFAULT_SCHEMA_DIR), len(load_catalog()), load_policy().compatibility]))",
        )
    )
    directory, count, compatibility = json.loads(out)
    assert Path(directory).is_relative_to(installed.venv)
    assert count == SCHEMA_COUNT
    assert compatibility


def test_agentlog_schemas_list_reaches_the_registry(installed: Installed, services: Settings) -> None:
    done = installed.run(
        installed.venv / "bin" / "agentlog",
        "schemas",
        "list",
        AGENTLOG_SCHEMA_REGISTRY_URL=services.schema_registry_url,
    )
    out = _check(done)
    subjects = [line for line in out.splitlines() if "versions=" in line]
    assert subjects, out


def test_a_workflow_runs_in_process_with_run_local(installed: Installed) -> None:
    script = installed.workdir / "wheel_app.py"
    script.write_text(
        textwrap.dedent(
            """
            import json
            from typing import Any

            from runtime import App, Context
            from runtime.local import run_local

            app = App("wheel-check")


            @app.tool("double")
            def double(x: int) -> int:
                return 2 * x


            @app.workflow("wf")
            async def wf(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
                return {"doubled": await ctx.tool("double", x=request["x"])}


            print(json.dumps(run_local(app, "wf", {"x": 1})))
            """
        )
    )
    out = _check(installed.run(installed.python, script))
    assert json.loads(out.strip().splitlines()[-1]) == {"doubled": 2}


def test_the_ui_ships_its_templates_and_assets(installed: Installed) -> None:
    out = _check(
        installed.run(
            installed.python,
            "-c",
            "import json, importlib.resources as r; from ui import pages;"
            "print(json.dumps([str(r.files('ui')), pages.error_page(404, 'gone'),"
            " r.files('ui').joinpath('static', 'ui.js').is_file(), r.files('ui').joinpath('static', 'ui.css').is_file()]))",
        )
    )
    where, page, js, css = json.loads(out)
    assert Path(where).is_relative_to(installed.venv)
    assert "<title>agentlog · 404</title>" in page and "gone" in page and js and css
    help_text = _check(installed.run(installed.venv / "bin" / "agentlog", "ui", "--help"))
    assert "--token-file" in help_text
