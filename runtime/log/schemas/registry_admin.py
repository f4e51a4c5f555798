"""What ``agentlog schemas list | register | check | diff`` do, against a Confluent-API registry.

The registry gives the verdict (it holds every version and the subject's compatibility
level); :mod:`runtime.log.schemas.diff` names the fields behind it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.config import Settings
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, LocalSchema, load_catalog, load_policy
from runtime.log.schemas.diff import breaking_fields, field_changes
from runtime.log.schemas.registry import compatibility_messages, is_not_found, registry_client
from runtime.log.schemas.registry_client import Schema, SchemaRegistryClient, SchemaRegistryError


@dataclass(frozen=True)
class SubjectReport:
    subject: str
    status: str  # new | unchanged | compatible | incompatible | registered | refused | changed
    detail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status not in ("incompatible", "refused")


def _latest(client: SchemaRegistryClient, subject: str) -> dict[str, Any] | None:
    try:
        registered = client.get_latest_version(subject)
    except SchemaRegistryError as exc:
        if is_not_found(exc):
            return None
        raise
    parsed: dict[str, Any] = json.loads(registered.schema.schema_str or "{}")
    parsed["__version__"] = registered.version
    parsed["__id__"] = registered.schema_id
    return parsed


class SchemaAdmin:
    """Registry administration for the local schema catalog."""

    def __init__(self, settings: Settings, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> None:
        self.settings = settings
        self.schema_dir = schema_dir
        self.catalog = load_catalog(schema_dir)
        self.policy = load_policy(schema_dir)
        self.client = registry_client(settings)

    def subjects(self, *, every_deployment: bool = False) -> list[dict[str, Any]]:
        """The registry's subjects of this deployment's topics (all of them with
        ``every_deployment``: one registry often serves many deployments, and each subject
        costs three requests)."""
        topics = (self.settings.commands_topic, self.settings.events_topic, self.settings.checkpoints_topic)
        mine = tuple(f"{topic}-" for topic in topics)
        rows = []
        for subject in sorted(self.client.get_subjects() or []):
            if not every_deployment and not subject.startswith(mine):
                continue
            versions = self.client.get_versions(subject)
            try:
                level = self.client.get_compatibility(subject)
            except SchemaRegistryError:
                level = "(global)"
            latest = self.client.get_latest_version(subject)
            rows.append(
                {
                    "subject": subject,
                    "versions": versions,
                    "latest_id": latest.schema_id,
                    "compatibility": level,
                }
            )
        return rows

    def _compatible(self, subject: str, schema: LocalSchema) -> bool:
        return bool(self.client.test_compatibility_all_versions(subject, Schema(schema.text, "AVRO")))

    def _incompatible_detail(self, subject: str, schema: LocalSchema, latest: dict[str, Any]) -> list[str]:
        fields = breaking_fields(latest, schema.parsed)
        detail = [f"{subject}: {f}" for f in fields]
        detail += [
            f"{subject}: registry: {m}"
            for m in compatibility_messages(self.settings.schema_registry_url, subject, schema.text)
        ]
        return detail or [f"{subject}: incompatible with a registered version (registry gave no detail)"]

    def check(self) -> list[SubjectReport]:
        reports = []
        for schema in self.catalog.values():
            subject = schema.subject(self.settings)
            latest = _latest(self.client, subject)
            if latest is None:
                reports.append(SubjectReport(subject, "new", ["not registered yet"]))
            elif self._same_as_registered(subject, schema):
                reports.append(SubjectReport(subject, "unchanged"))
            elif self._compatible(subject, schema):
                reports.append(SubjectReport(subject, "compatible", field_changes(latest, schema.parsed)))
            else:
                reports.append(
                    SubjectReport(subject, "incompatible", self._incompatible_detail(subject, schema, latest))
                )
        return reports

    def _same_as_registered(self, subject: str, schema: LocalSchema) -> bool:
        try:
            self.client.lookup_schema(subject, Schema(schema.text, "AVRO"))
        except SchemaRegistryError:
            return False
        return True

    def register(self) -> list[SubjectReport]:
        """Register a new version of every changed schema; refuse the incompatible ones."""
        reports = []
        for schema in self.catalog.values():
            subject = schema.subject(self.settings)
            latest = _latest(self.client, subject)
            if latest is not None and self._same_as_registered(subject, schema):
                self._ensure_level(subject)
                reports.append(SubjectReport(subject, "unchanged", [f"id {latest['__id__']}"]))
                continue
            if latest is not None and not self._compatible(subject, schema):
                reports.append(
                    SubjectReport(subject, "refused", self._incompatible_detail(subject, schema, latest))
                )
                continue
            # The level goes on before the first version, so no version is ever judged by the global default.
            self._ensure_level(subject)
            schema_id = self.client.register_schema(subject, Schema(schema.text, "AVRO"))
            reports.append(SubjectReport(subject, "registered", [f"id {schema_id}"]))
        return reports

    def _ensure_level(self, subject: str) -> None:
        try:
            current = self.client.get_compatibility(subject)
        except SchemaRegistryError:
            current = None
        if current != self.policy.compatibility:
            self.client.set_compatibility(subject, self.policy.compatibility)

    def diff(self) -> list[SubjectReport]:
        reports = []
        for schema in self.catalog.values():
            subject = schema.subject(self.settings)
            latest = _latest(self.client, subject)
            if latest is None:
                reports.append(SubjectReport(subject, "new", ["local only"]))
            elif self._same_as_registered(subject, schema):
                reports.append(SubjectReport(subject, "unchanged", [f"version {latest['__version__']}"]))
            else:
                changes = field_changes(latest, schema.parsed) or ["docs or defaults differ"]
                reports.append(
                    SubjectReport(subject, "changed", [f"vs version {latest['__version__']}", *changes])
                )
        return reports
