"""Whether an interpreter imports a package from bytecode or compiles it at every start.

A cold recovery (R) is mostly imports. An interpreter whose packages have no bytecode compiles them
in every process -- uv does not compile at install, and where ``PYTHONDONTWRITEBYTECODE`` is set
the first import never writes it -- and measures a start the engine beside it does not pay (the
PydanticAI agent's R: 1.9 s against 0.9 s). ``make setup`` compiles the project's virtualenv and
bench/peers/install.sh's pip compiles the peers'; bench/compare.py and bench/compare_agents.py
refuse to measure an interpreter that would compile.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

# Run by the interpreter checked: the top-level modules of the package (its own directory, not its
# subpackages) that have no bytecode where that interpreter would look for it. A package's spec is
# found without importing it.
_PROBE = """
import importlib.util, os, sys
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        print(name + ": not installed")
        continue
    folder = os.path.dirname(spec.origin)
    sources = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
    missing = [s for s in sources if not os.path.exists(importlib.util.cache_from_source(s))]
    if missing:
        print(f"{name}: {len(missing)} of {len(sources)} modules without bytecode")
"""


# How to compile what is missing.
FIX = (
    "`make setup` (the project's virtualenv) or bench/peers/install.sh (the peers'); any interpreter: "
    "`PYTHON -m compileall -q -j 0` over its site-packages and this checkout's directories"
)


def uncompiled(python: Path | str, packages: Sequence[str]) -> list[str]:
    """What ``python`` would compile from source at each start, one line per package ([] if none)."""
    found = subprocess.run([str(python), "-c", _PROBE, *packages], capture_output=True, text=True, check=True)
    return found.stdout.splitlines()


def require_compiled(python: Path | str, packages: Sequence[str], fix: str = FIX) -> None:
    """Stop, naming what is missing and how to compile it, unless ``python`` imports ``packages``
    from bytecode."""
    missing = uncompiled(python, packages)
    if missing:
        raise SystemExit(
            f"{python} would compile these from source at every start, which a cold start (R) would "
            f"measure: {'; '.join(missing)}. Compile them first: {fix}"
        )
