"""``agentlog demo`` imports the examples of the checkout it runs in (the wheel does not ship them),
and says so where there are none."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from runtime.cli import demo
from runtime.config import Settings
from runtime.errors import AgentlogError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _examples_modules() -> dict[str, ModuleType]:
    return {name: m for name, m in sys.modules.items() if name == "examples" or name.startswith("examples.")}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The working directory a scratch folder; neither the repository nor its examples importable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT])
    # An editable install's finder maps the packages it was installed with, whatever the path says.
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if "__editable__" not in f.__module__])
    before = _examples_modules()
    for name in before:
        del sys.modules[name]
    importlib.invalidate_caches()  # the finder of "." lists another folder now
    yield tmp_path
    for name in _examples_modules():
        del sys.modules[name]
    sys.modules.update(before)
    importlib.invalidate_caches()


def test_the_demo_of_the_working_directory_runs(elsewhere: Path) -> None:
    (elsewhere / "examples").mkdir()
    (elsewhere / "examples" / "__init__.py").write_text("")
    (elsewhere / "examples" / "demo.py").write_text("def main() -> int:\n    return 7\n")
    assert demo._demo(argparse.Namespace(), Settings()) == 7


def test_without_a_checkout_the_demo_says_where_it_runs(elsewhere: Path) -> None:
    with pytest.raises(AgentlogError, match="from the checkout's root"):
        demo._demo(argparse.Namespace(), Settings())


def test_the_demos_own_import_errors_are_not_hidden(elsewhere: Path) -> None:
    (elsewhere / "examples").mkdir()
    (elsewhere / "examples" / "__init__.py").write_text("")
    (elsewhere / "examples" / "demo.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere"):
        demo._demo(argparse.Namespace(), Settings())
