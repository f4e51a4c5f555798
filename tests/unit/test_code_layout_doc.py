"""docs/code-layout.md against the code: its package picture is the one tools/layout_picture.py draws
from today's imports, and its text names every package and every module directly in runtime/."""

from __future__ import annotations

from types import ModuleType

import pytest

from support.services import ROOT
from support.tools import load_tool

pytestmark = pytest.mark.unit

DOC = ROOT / "docs" / "code-layout.md"


@pytest.fixture(scope="module")
def layout_picture() -> ModuleType:
    return load_tool("layout_picture")


def test_transitive_reduction_keeps_only_arrows_no_longer_path_shows(layout_picture: ModuleType) -> None:
    edges = {"cli": {"worker", "workflow", "log"}, "worker": {"workflow"}, "workflow": {"log"}, "log": set()}
    assert layout_picture.transitive_reduction(edges) == {
        "cli": {"worker"},
        "worker": {"workflow"},
        "workflow": {"log"},
        "log": set(),
    }


def test_a_module_is_drawn_in_its_layer(layout_picture: ModuleType) -> None:
    assert layout_picture.node_of("runtime.worker.execution") == "runtime.worker"
    assert layout_picture.node_of("runtime.log.kafka.writer") == "runtime.log.kafka"
    assert layout_picture.node_of("runtime.config") == "runtime.config"
    assert layout_picture.node_of("consumers.core") == "consumers"


def test_the_docs_picture_is_the_one_the_code_draws(layout_picture: ModuleType) -> None:
    assert layout_picture.main(["--check"]) == 0, "run: python tools/layout_picture.py --write"


def test_the_docs_name_every_package_and_every_flat_runtime_module() -> None:
    text = DOC.read_text()
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("runtime", "consumers", "analytics", "infra", "ui")
        for init in (ROOT / top).rglob("__init__.py")
    }
    flat = {f"runtime.{path.stem}" for path in (ROOT / "runtime").glob("*.py") if path.stem != "__init__"}
    missing = sorted(name for name in packages | flat if f"`{name}`" not in text)
    assert not missing, f"docs/code-layout.md does not name: {missing}"
