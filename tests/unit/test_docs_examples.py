"""Every Python block of README.md and docs/ runs (pytest-examples, as PydanticAI does), and every
program under examples/docs/ that a page shows in parts runs whole on the in-memory log.

A block is either a whole program, executed here, or a snippet include (``--8<-- "examples/..."``)
of a file under examples/docs/ -- code that needs more than one block to make sense, or the real
services; mypy --strict checks those files and a test runs each of them (the in-memory ones
below, the service ones in tests/integration/test_docs_service_examples.py)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

from support.services import ROOT

pytestmark = pytest.mark.unit

SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::[\w-]+)?"$')
PAGES = [ROOT / "README.md", ROOT / "docs"]
EXAMPLES = ROOT / "examples" / "docs"
# Programs that need Kafka and the registry: tests/integration/test_docs_service_examples.py runs them.
NEEDS_SERVICES = {"client_usage.py", "watching.py"}


def _blocks() -> list[CodeExample]:
    return [example for page in PAGES for example in find_examples(page)]


def _included(example: CodeExample) -> list[Path]:
    """The files a block includes, if it is made of snippet includes only."""
    lines = [line.strip() for line in example.source.splitlines() if line.strip()]
    matches = [SNIPPET.match(line) for line in lines]
    if lines and all(matches):
        return [ROOT / match.group(1) for match in matches if match]
    return []


def test_the_pages_have_python_blocks() -> None:
    # A change to the search (a renamed folder) must not turn this file into a test of nothing.
    assert len(_blocks()) >= 10


@pytest.mark.parametrize("example", _blocks(), ids=str)
def test_python_block_runs(example: CodeExample, eval_example: EvalExample) -> None:
    included = _included(example)
    if included:
        for path in included:
            assert path.is_file(), f"{example}: includes {path}, which does not exist"
            assert path.parent == EXAMPLES, f"{example}: includes {path}, which no test runs"
        return
    eval_example.run(example)


def _programs() -> list[Path]:
    return sorted(path for path in EXAMPLES.glob("*.py") if path.name != "__init__.py")


def test_every_service_program_exists() -> None:
    assert {path.name for path in _programs()} >= NEEDS_SERVICES


@pytest.mark.parametrize(
    "program", [p for p in _programs() if p.name not in NEEDS_SERVICES], ids=lambda p: p.name
)
def test_example_program_runs(program: Path) -> None:
    """Each program checks what its page says with asserts; running it as ``__main__`` runs them."""
    runpy.run_path(str(program), run_name="__main__")
