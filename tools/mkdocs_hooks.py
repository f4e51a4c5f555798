"""mkdocs hooks (mkdocs.yml `hooks:`): the generated parts of the reference pages.

A page that holds a marker of tools/docs_reference.py gets it replaced, at build time, by the
table generated from the code (the CLI's parsers, the settings model)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads this file by path; the packages live at the root
    sys.path.insert(0, str(ROOT))

from tools.docs_reference import render  # noqa: E402


def on_page_markdown(markdown: str, /, **_: Any) -> str:
    # A fixed width: argparse wraps usage lines to the terminal, and the page must not depend on it.
    os.environ["COLUMNS"] = "100"
    return render(markdown)
