"""tools/check_cycles.py: Tarjan on a toy graph, a cycle closed under TYPE_CHECKING, none in the packages."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from support.tools import load_tool

pytestmark = pytest.mark.unit



@pytest.fixture(scope="module")
def check_cycles() -> ModuleType:
    return load_tool("check_cycles")


def test_strongly_connected_components(check_cycles: ModuleType) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    components = sorted(check_cycles.strongly_connected(graph))
    assert components == [["a", "b", "c"], ["d", "e"], ["f"], ["g"]]


def test_the_packages_have_no_import_cycles(check_cycles: ModuleType) -> None:
    _, cycles = check_cycles.find_cycles(check_cycles.PACKAGES)
    assert cycles == []


def test_an_import_under_type_checking_closes_a_cycle(
    check_cycles: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "typed_circle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "host.py").write_text("from typed_circle import guest\n")
    (package / "guest.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from typed_circle import host\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _, cycles = check_cycles.find_cycles(["typed_circle"])
    assert cycles == [["typed_circle.guest", "typed_circle.host"]]
