"""tools/check_cycles.py: Tarjan on a toy graph, and no cycle in the packages themselves."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from support.services import ROOT

pytestmark = pytest.mark.unit

TOOL = ROOT / "tools" / "check_cycles.py"


@pytest.fixture(scope="module")
def check_cycles() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_cycles", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_cycles"] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    return module


def test_strongly_connected_components(check_cycles: ModuleType) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    components = sorted(check_cycles.strongly_connected(graph))
    assert components == [["a", "b", "c"], ["d", "e"], ["f"], ["g"]]


def test_the_packages_have_no_import_cycles(check_cycles: ModuleType) -> None:
    _, cycles = check_cycles.find_cycles(check_cycles.PACKAGES)
    assert cycles == []
