"""Report import cycles between the modules of each agentlog package; exit 1 if there is one.

import-linter's contracts say which way packages and layers may import; they do not forbid two
modules of one layer importing each other. A cycle makes import order matter (one module sees the
other half-initialised) and makes neither module testable alone, so every strongly connected
component of the module import graph must have exactly one module.

The graph is grimp's (the one import-linter checks): imports inside functions count -- a lazy
import is still a dependency -- and so do imports under ``if TYPE_CHECKING:``. Those never run, so
they cannot break import order, but a module that names another's type depends on it all the
same: neither can be read or changed alone. A two-way relation is typed with a protocol the
lower module defines and the upper one satisfies.

Usage: ``python tools/check_cycles.py [package ...]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

PACKAGES = ("runtime", "consumers", "analytics", "infra", "examples", "ui")
ROOT = Path(__file__).resolve().parents[1]


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a deep package must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            if successors:
                succ = successors.pop()
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, sorted(graph.get(succ, ()))))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def find_cycles(packages: Iterable[str]) -> tuple[grimp.ImportGraph, list[list[str]]]:
    """The import graph, and every group of two or more modules that import each other."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    return graph, [component for component in strongly_connected(edges) if len(component) > 1]


def _explain(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    members = set(component)
    lines = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            details = graph.get_import_details(importer=importer, imported=imported)
            where = ", ".join(f"line {d['line_number']}" for d in details)
            lines.append(f"    {importer} -> {imported} ({where})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("packages", nargs="*", default=list(PACKAGES))
    args = parser.parse_args(argv)
    # This checkout's packages: examples/ is in no install, and an editable install may be another checkout's.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    graph, found = find_cycles(args.packages)
    for component in found:
        print(f"import cycle between {len(component)} modules: {', '.join(component)}")
        print("\n".join(_explain(graph, component)))
    if not found:
        print(f"no import cycles in {', '.join(args.packages)} ({len(graph.modules)} modules)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
