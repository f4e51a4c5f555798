"""What ``agentlog audit sql`` accepts: one read-only statement.

The store also runs these with ClickHouse's ``readonly = 2``; this check comes first so a
rejected statement gets a plain message, and because chDB applies some per-query settings with
``SET``, where a ``readonly`` left behind by a failed write would stick to the session.
"""

from __future__ import annotations

import re

from runtime.errors import TerminalError

_READ_KEYWORDS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS"})
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`")


class ReadOnlyViolation(TerminalError):
    """A statement that is not a single read-only query."""


def check_read_only(sql: str) -> str:
    """Return ``sql`` stripped if it is one read-only statement; raise ReadOnlyViolation otherwise."""
    code = _COMMENTS.sub(" ", sql)
    bare = _STRINGS.sub("''", code).strip().rstrip(";").strip()
    if not bare:
        raise ReadOnlyViolation("empty statement")
    if ";" in bare:
        raise ReadOnlyViolation("one statement at a time")
    first = bare.split(None, 1)[0].upper().lstrip("(")
    if first not in _READ_KEYWORDS:
        raise ReadOnlyViolation(
            f"only read-only statements ({', '.join(sorted(_READ_KEYWORDS))}) are allowed, not {first}"
        )
    if re.search(r"\bINTO\s+OUTFILE\b", bare, re.IGNORECASE):
        raise ReadOnlyViolation("INTO OUTFILE writes a file; not allowed")
    return sql.strip().rstrip(";").strip()
