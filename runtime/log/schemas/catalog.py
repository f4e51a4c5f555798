"""The local schema catalog: the ``.avsc`` files and the registry policy beside them.

A schema's namespace says which topic it belongs to (``dev.agentlog.commands`` or
``dev.agentlog.events``); its subject in the registry follows TopicRecordNameStrategy,
``<topic>-<full record name>`` (see ``schemas/policy.json`` for why).

The default folder is ``avsc`` beside this module, found with ``importlib.resources``: in a
checkout or an editable install a link to the repository's top-level ``schemas/`` (the source of
the schemas), in a wheel ``site-packages/runtime/log/schemas/avsc`` (the wheel copies the files
through the link). Any other folder (``agentlog schemas ... --dir``) is read the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from typing import Any

from runtime.config import Settings
from runtime.errors import TerminalError


class SchemaFileError(TerminalError, ValueError):
    """A local schema file is unreadable or breaks the catalog's rules; names the file."""


def packaged_schema_dir() -> Path:
    """The folder of the schemas shipped with agentlog. A folder on disk: agentlog is installed
    unzipped (its native dependencies cannot be imported from a zip either)."""
    root = files("runtime.log.schemas").joinpath("avsc")
    if not isinstance(root, Path):
        raise SchemaFileError(f"the packaged schemas are not a folder on disk ({root}): pass a folder")
    return root.resolve()  # a checkout's link resolved: messages name the file a developer edits


DEFAULT_SCHEMA_DIR = packaged_schema_dir()


@dataclass(frozen=True)
class LocalSchema:
    """One record schema read from disk."""

    path: Path
    text: str
    full_name: str
    name: str
    role: str  # "commands", "events", "checkpoints" or "schedules"

    @cached_property
    def parsed(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.text)
        return value

    def topic(self, settings: Settings) -> str:
        if self.role == "commands":
            return settings.commands_topic
        if self.role == "schedules":
            return settings.schedules_topic
        return settings.checkpoints_topic if self.role == "checkpoints" else settings.events_topic

    def subject(self, settings: Settings) -> str:
        return f"{self.topic(settings)}-{self.full_name}"


@dataclass(frozen=True)
class Policy:
    compatibility: str
    roles_by_namespace: dict[str, str]


def load_policy(directory: Path = DEFAULT_SCHEMA_DIR) -> Policy:
    path = directory / "policy.json"
    if not path.exists():
        path = DEFAULT_SCHEMA_DIR / "policy.json"
    raw = json.loads(path.read_text())
    return Policy(compatibility=raw["compatibility"], roles_by_namespace=dict(raw["topics"]))


def load_catalog(directory: Path = DEFAULT_SCHEMA_DIR) -> dict[str, LocalSchema]:
    """Every ``*.avsc`` in ``directory``, keyed by record name (not full name)."""
    policy = load_policy(directory)
    catalog: dict[str, LocalSchema] = {}
    files = sorted(directory.glob("*.avsc"))
    if not files:
        raise SchemaFileError(f"no .avsc files in {directory}")
    for path in files:
        text = path.read_text()
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaFileError(f"{path}: not JSON: {exc}") from exc
        if parsed.get("type") != "record" or "name" not in parsed:
            raise SchemaFileError(f"{path}: expected one Avro record schema")
        namespace = parsed.get("namespace", "")
        role = policy.roles_by_namespace.get(namespace)
        if role is None:
            raise SchemaFileError(
                f"{path}: namespace {namespace!r} is not one of {sorted(policy.roles_by_namespace)}"
            )
        name = parsed["name"]
        catalog[name] = LocalSchema(path, text, f"{namespace}.{name}", name, role)
    return catalog
