"""The one error the infra package raises when a service cannot be brought up (an AgentlogError:
the CLI prints it on one line; its message keeps the log excerpt for whoever catches it)."""

from __future__ import annotations

import re
from pathlib import Path

from runtime.errors import AgentlogError

TAIL_LINES = 20
ERROR_LINES = 8
START_MARKER = "==== "  # process.start_detached writes it before each start
_ERROR = re.compile(r"\b(ERROR|FATAL|PANIC)\b|\"level\":\"ERROR\"|^Caused by: |Exception: ")


def _read_end(path: Path, size: int = 256 * 1024) -> list[str]:
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            end = fh.tell()
            fh.seek(max(0, end - size))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


def log_tail(path: Path | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path``, or an empty string when it cannot be read."""
    if path is None:
        return ""
    return "\n".join(_read_end(path)[-lines:])


def log_errors(path: Path | None, limit: int = ERROR_LINES) -> list[str]:
    """The first error lines (ERROR, FATAL, exceptions) since the last start recorded in ``path``."""
    if path is None:
        return []
    text = _read_end(path)
    starts = [i for i, line in enumerate(text) if line.startswith(START_MARKER)]
    found: list[str] = []
    for line in text[starts[-1] if starts else 0 :]:
        if _ERROR.search(line) and line.strip() not in found:
            found.append(line.strip())
            if len(found) == limit:
                break
    return found


def _indent(lines: list[str]) -> str:
    return "\n".join("    " + line for line in lines)


class ServiceError(AgentlogError, RuntimeError):
    """A service could not be set up, started, stopped or reached.

    The message names the service, the reason and the log file, then the log's first error lines
    since the last start (when they are not among the last lines) and its last lines.
    """

    def __init__(self, service: str, reason: str, log_path: Path | None = None) -> None:
        self.service = service
        self.reason = reason
        self.log_path = log_path
        message = f"{service}: {reason}"
        if log_path is not None:
            message += f"\n  log: {log_path}"
            tail = log_tail(log_path).splitlines()
            errors = [line for line in log_errors(log_path) if line not in {t.strip() for t in tail}]
            if errors:
                message += f"\n  first errors in the log:\n{_indent(errors)}"
            if tail:
                message += f"\n  last lines of the log:\n{_indent(tail)}"
        super().__init__(message)
