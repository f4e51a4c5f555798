"""The scripts of tools/ as modules, for the unit tests of their pure parts (tools/ is no package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.services import ROOT


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    return module
