"""The benchmarks' check that an interpreter imports a package from bytecode (bench/bytecode.py):
a real interpreter and a real package in a temporary directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.bytecode import require_compiled, uncompiled

pytestmark = pytest.mark.unit


def test_a_package_without_bytecode_is_named_until_it_is_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    assert uncompiled(sys.executable, ["probe_pkg"]) == ["probe_pkg: 2 of 2 modules without bytecode"]
    with pytest.raises(SystemExit, match="probe_pkg: 2 of 2 modules without bytecode"):
        require_compiled(sys.executable, ["probe_pkg"])

    # Compiled by an interpreter of the same environment as the probe's: where it writes the
    # bytecode (beside the sources, or under PYTHONPYCACHEPREFIX) is where the probe looks.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    assert uncompiled(sys.executable, ["probe_pkg"]) == []
    require_compiled(sys.executable, ["probe_pkg"])


def test_a_package_that_is_not_installed_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert uncompiled(sys.executable, ["no_such_package_here"]) == ["no_such_package_here: not installed"]
