"""Draw the package structure from the code's own imports, as a Mermaid diagram for docs/code-layout.md.

A node is a top-level package, a subpackage of ``runtime`` (``runtime.log`` split into its own
subpackages), or one of the modules that sit directly in ``runtime/``. An arrow ``a --> b`` means
some module of ``a`` imports some module of ``b`` -- ``TYPE_CHECKING`` and function-level imports
included, as tools/check_cycles.py counts them -- drawn only where no longer path already shows it
(the transitive reduction), so the picture reads as layers. The graph is grimp's, the one
import-linter checks.

``python tools/layout_picture.py`` prints the diagram; ``--write`` replaces the block between the
markers in docs/code-layout.md; ``--check`` exits 1 if that block is not what the code draws today
(the unit suite runs the check, so the picture cannot drift from the code).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

PACKAGES = ("runtime", "consumers", "analytics", "infra", "ui")
# Packages whose subpackages are nodes of their own: the layers inside runtime that DESIGN.md names.
SPLIT = ("runtime", "runtime.log")
DOC = Path(__file__).resolve().parent.parent / "docs" / "code-layout.md"
START, END = "<!-- layout picture: start (tools/layout_picture.py --write) -->", "<!-- layout picture: end -->"


def node_of(module: str) -> str:
    """The node a module is drawn in: the direct child of the deepest split package that holds it."""
    parts = module.split(".")
    depth = 1
    while ".".join(parts[:depth]) in SPLIT and depth < len(parts):
        depth += 1
    return ".".join(parts[:depth])


def package_graph(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Node -> nodes it imports (no self-arrows)."""
    edges: dict[str, set[str]] = {}
    for module in sorted(graph.modules):
        source = node_of(module)
        targets = edges.setdefault(source, set())
        for imported in graph.find_modules_directly_imported_by(module):
            target = node_of(imported)
            if target != source:
                targets.add(target)
    return edges


def transitive_reduction(edges: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Keep ``a -> b`` only where ``b`` is not reachable from ``a`` through another successor."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for succ in edges.get(todo.pop(), ()):
                if succ not in seen:
                    seen.add(succ)
                    todo.append(succ)
        return seen

    reduced: dict[str, set[str]] = {}
    for source, targets in edges.items():
        via_others = set().union(*(reachable(t) for t in targets)) if targets else set()
        reduced[source] = {t for t in targets if t not in via_others}
    return reduced


def mermaid(edges: Mapping[str, Iterable[str]]) -> str:
    ids = {name: name.replace(".", "_") for name in sorted(set(edges).union(*map(set, edges.values())))}
    lines = ["```mermaid", "flowchart TD"]
    lines += [f'    {ident}["{name}"]' for name, ident in ids.items()]
    for source in sorted(edges):
        lines += [f"    {ids[source]} --> {ids[target]}" for target in sorted(edges[source])]
    lines.append("```")
    return "\n".join(lines)


def draw(packages: Iterable[str] = PACKAGES) -> str:
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    return mermaid(transitive_reduction(package_graph(graph)))


def replaced_block(text: str, picture: str) -> str:
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"{DOC}: the markers {START!r} and {END!r} are missing")
    return f"{head}{START}\n{picture}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"replace the picture in {DOC.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {DOC.name}'s picture is out of date")
    args = parser.parse_args(argv)
    picture = draw()
    if not (args.write or args.check):
        print(picture)
        return 0
    text = DOC.read_text()
    wanted = replaced_block(text, picture)
    if args.write:
        DOC.write_text(wanted)
        return 0
    if wanted != text:
        print(f"{DOC}: the layout picture is out of date; run python tools/layout_picture.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
