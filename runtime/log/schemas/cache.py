"""What the registry has told this deployment, kept in the state folder for a registry outage.

A registry that is down must not stop a reader (``RunHandle.status``, ``agentlog history``) or a
cold start (``agentlog submit``, ``agentlog worker``) that needs only schemas the project already
knows. The registry's answers that matter are immutable once given -- an id always names the same
schema text, and a (subject, schema) pair keeps its id and version -- so they can be kept:

- ``writers``: subject -> sha256 of a schema text -> [id, version]: the id to write this code's
  schema with (``.avsc`` text, as the registry matched it);
- ``ids``: schema id -> {"sha": sha256 of its text, "versions": {subject: version}}: a writer
  schema read by id;
- ``texts``: sha256 -> schema text (one copy however many subjects and ids share it).

The cache is consulted only when the registry cannot be reached: while it answers, its answer
wins (a registry recreated at the same URL hands out new ids, and a cache must never outvote it).
One file per registry URL, ``<state_dir>/schema-cache/<sha256(url)[:16]>.json``; writers merge
under an exclusive ``flock`` and replace the file atomically, so concurrent workers and clients
add to it without losing each other's entries or leaving a torn file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("agentlog.schemas")

MAX_IDS = 20_000  # the oldest ids are dropped past this (scratch deployments each add ~25)


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cache_path(state_dir: Path, registry_url: str) -> Path:
    return state_dir / "schema-cache" / f"{text_sha(registry_url)[:16]}.json"


class SchemaCache:
    """The kept answers of one registry (see the module docstring). Thread-safe."""

    def __init__(self, path: Path, registry_url: str) -> None:
        self.path = path
        self.registry_url = registry_url
        self._lock = threading.Lock()
        self._data: dict[str, Any] | None = None  # read on first use
        # Answers served from the cache (it is read only when the registry cannot answer): the
        # worker's agentlog_schema_cache_fallbacks_total.
        self.fallbacks = 0

    # -- reading -----------------------------------------------------------------------------------
    def _loaded(self) -> dict[str, Any]:
        if self._data is None:
            self._data = _read(self.path)
        return self._data

    def writer(self, subject: str, text: str) -> tuple[int, int] | None:
        """The (id, version) the registry gave ``text`` under ``subject``, if ever asked."""
        with self._lock:
            found = self._loaded()["writers"].get(subject, {}).get(text_sha(text))
            self.fallbacks += found is not None
        return None if found is None else (int(found[0]), int(found[1]))

    def schema(self, schema_id: int) -> str | None:
        """The text of schema ``schema_id``, if ever read."""
        with self._lock:
            data = self._loaded()
            entry = data["ids"].get(str(schema_id))
            text: str | None = None if entry is None else data["texts"].get(entry["sha"])
            self.fallbacks += text is not None
            return text

    def version(self, schema_id: int, subject: str) -> int | None:
        with self._lock:
            entry = self._loaded()["ids"].get(str(schema_id))
        if entry is None:
            return None
        version = entry["versions"].get(subject)
        if version is None:
            return None
        with self._lock:
            self.fallbacks += 1
        return int(version)

    # -- writing -----------------------------------------------------------------------------------
    def remember_writer(self, subject: str, text: str, schema_id: int, version: int) -> None:
        """Keep that ``text`` is ``schema_id`` (version ``version``) under ``subject``."""
        self.remember(writers=[(subject, text, schema_id, version)])

    def remember_id(self, schema_id: int, text: str, subject: str, version: int) -> None:
        self.remember(ids=[(schema_id, text, subject, version)])

    def remember(
        self,
        *,
        writers: Sequence[tuple[str, str, int, int]] = (),
        ids: Sequence[tuple[int, str, str, int]] = (),
    ) -> None:
        """Add entries; the file is rewritten only if something is new. A cache that cannot be
        written is a warning, never a failure: it only matters in an outage."""
        entries = [*((i, t, s, v) for s, t, i, v in writers), *ids]
        if not entries or self._known(writers, ids):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock, _exclusive(self.path.with_suffix(".lock")):
                data = _read(self.path)  # merge with what other processes added
                for subject, text, schema_id, version in writers:
                    data["writers"].setdefault(subject, {})[text_sha(text)] = [schema_id, version]
                for schema_id, text, subject, version in entries:
                    sha = text_sha(text)
                    data["texts"][sha] = text
                    entry = data["ids"].setdefault(str(schema_id), {"sha": sha, "versions": {}})
                    entry["versions"][subject] = version
                _trim(data)
                temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
                temporary.write_text(json.dumps(data, separators=(",", ":")))
                temporary.replace(self.path)
                self._data = data
        except OSError as error:
            logger.warning("schema cache %s not written: %s", self.path, error)

    def _known(
        self, writers: Sequence[tuple[str, str, int, int]], ids: Sequence[tuple[int, str, str, int]]
    ) -> bool:
        with self._lock:
            data = self._loaded()
            for subject, text, schema_id, version in writers:
                if data["writers"].get(subject, {}).get(text_sha(text)) != [schema_id, version]:
                    return False
            for schema_id, _text, subject, version in ids:
                entry = data["ids"].get(str(schema_id))
                if entry is None or entry["versions"].get(subject) != version:
                    return False
        return True


def _empty() -> dict[str, Any]:
    return {"writers": {}, "ids": {}, "texts": {}}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _empty()
    except (OSError, ValueError) as error:
        logger.warning("schema cache %s unreadable, starting afresh: %s", path, error)
        return _empty()
    if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in _empty()):
        logger.warning("schema cache %s is not a schema cache, starting afresh", path)
        return _empty()
    return data


def _trim(data: dict[str, Any]) -> None:
    ids: dict[str, Any] = data["ids"]
    while len(ids) > MAX_IDS:
        ids.pop(next(iter(ids)))
    used = {entry["sha"] for entry in ids.values()}
    used.update(sha for shas in data["writers"].values() for sha in shas)
    data["texts"] = {sha: text for sha, text in data["texts"].items() if sha in used}


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
