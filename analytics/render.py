"""Printing audit answers: an aligned table for people, JSON for machines."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

_MAX_CELL = 60


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else ""
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, list | dict) else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], out: TextIO) -> None:
    """Columns padded to their widest cell; empty columns are kept so the shape is stable."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not rows:
        out.write("(no rows)\n")


def as_json(rows: Sequence[Mapping[str, Any]], out: TextIO) -> None:
    json.dump(list(rows), out, indent=None, separators=(",", ":"))
    out.write("\n")
