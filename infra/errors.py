"""The one error the infra package raises when a service cannot be brought up."""

from __future__ import annotations

from pathlib import Path

TAIL_LINES = 20


def log_tail(path: Path | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path``, or an empty string when it cannot be read."""
    if path is None:
        return ""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


class ServiceError(RuntimeError):
    """A service could not be set up, started, stopped or reached.

    The message names the service, the reason and the log file, followed by the log's last lines.
    """

    def __init__(self, service: str, reason: str, log_path: Path | None = None) -> None:
        self.service = service
        self.reason = reason
        self.log_path = log_path
        message = f"{service}: {reason}"
        if log_path is not None:
            message += f"\n  log: {log_path}"
            tail = log_tail(log_path)
            if tail:
                indented = "\n".join("    " + line for line in tail.splitlines())
                message += f"\n  last lines of the log:\n{indented}"
        super().__init__(message)
