"""Where things live: the per-user artefact cache, the state folder, and file locks.

Artefacts (Kafka's jars, the registry binary) are keyed by version under
``$XDG_CACHE_HOME/agentlog`` (``~/.cache/agentlog``), so a second ``up`` only starts processes.
Service data, pid files and logs live in the state folder (``Settings.state_dir``).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtime.config import Settings


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/agentlog``, by default ``~/.cache/agentlog``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentlog"


def state_dir(settings: Settings) -> Path:
    """The state folder as an absolute path (services run with other working directories)."""
    return settings.state_dir.expanduser().resolve()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
