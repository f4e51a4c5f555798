"""``agentlog schemas list | register | check | diff``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import Settings
from runtime.errors import RetryableError

if TYPE_CHECKING:
    from runtime.log.schemas.registry_admin import SchemaAdmin, SubjectReport
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR, load_catalog


def _print_reports(reports: list[SubjectReport], as_json: bool) -> int:
    if as_json:
        print(
            json.dumps(
                [{"subject": r.subject, "status": r.status, "detail": r.detail} for r in reports], indent=2
            )
        )
    else:
        width = max((len(r.subject) for r in reports), default=10)
        for report in reports:
            print(f"{report.subject:<{width}}  {report.status:<12}  {'; '.join(report.detail)}")
    bad = [r for r in reports if not r.ok]
    for report in bad:
        for line in report.detail:
            print(f"error: {line}" if line.startswith(report.subject) else f"error: {report.subject}: {line}")
    return 1 if bad else 0


def _admin(settings: Settings, directory: Path) -> SchemaAdmin:
    from runtime.log.schemas.registry_admin import (
        SchemaAdmin,  # the registry client is slow to import; only here
    )

    return SchemaAdmin(settings, directory)


class RegistryUnavailable(RetryableError):
    """The schema registry failed or could not be reached."""


@contextmanager
def _registry(settings: Settings) -> Iterator[None]:
    """The registry clients' own errors as one agentlog error naming the registry: confluent's
    client raises SchemaRegistryError for an answer and its HTTP transport's errors for no answer."""
    import httpx
    import httpx2  # confluent-kafka's schema-registry client speaks HTTP through it
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        yield
    except (SchemaRegistryError, httpx.HTTPError, httpx2.HTTPError) as exc:
        raise RegistryUnavailable(f"schema registry {settings.schema_registry_url}: {exc}") from exc


def _local_rows(settings: Settings, directory: Path) -> list[dict[str, object]]:
    """The subjects the local catalog would register, for when the registry cannot say."""
    return [
        {
            "subject": schema.subject(settings),
            "versions": None,
            "latest_id": None,
            "compatibility": None,
            "local": schema.path.name,
            "registry": "unreachable",
        }
        for schema in sorted(load_catalog(directory).values(), key=lambda s: s.subject(settings))
    ]


def _list(args: argparse.Namespace, settings: Settings) -> int:
    try:
        with _registry(settings):
            rows = _admin(settings, args.dir).subjects(every_deployment=args.all)
    except RegistryUnavailable as exc:
        # Before `infra up` (or in an outage) the local catalog still answers what would be
        # registered; the registry's own state is what cannot be shown.
        local = _local_rows(settings, args.dir)
        print(f"agentlog: {exc}", file=sys.stderr)
        print(
            f"agentlog: the registry is unreachable; the local catalog ({len(local)} schemas in {args.dir}):",
            file=sys.stderr,
        )
        if args.json:
            print(json.dumps(local, indent=2))
        else:
            for row in local:
                print(f"{row['subject']:<70} local={row['local']} registry=unreachable")
        return 0
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['subject']:<70} versions={row['versions']} id={row['latest_id']} {row['compatibility']}")
    return 0


def _register(args: argparse.Namespace, settings: Settings) -> int:
    with _registry(settings):
        reports = _admin(settings, args.dir).register()
    return _print_reports(reports, args.json)


def _check(args: argparse.Namespace, settings: Settings) -> int:
    with _registry(settings):
        reports = _admin(settings, args.dir).check()
    return _print_reports(reports, args.json)


def _diff(args: argparse.Namespace, settings: Settings) -> int:
    with _registry(settings):
        reports = _admin(settings, args.dir).diff()
    return _print_reports(reports, args.json)


def add_schema_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schemas = subparsers.add_parser("schemas", help="the event schemas and the registry")
    actions = schemas.add_subparsers(dest="action", required=True)
    for name, func, text in (
        ("list", _list, "this deployment's subjects in the registry (--all: every subject)"),
        ("register", _register, "register new versions; refuse incompatible ones"),
        ("check", _check, "test local schemas against the registry's compatibility level"),
        ("diff", _diff, "local schemas vs registered ones"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument(
            "--dir",
            type=Path,
            default=DEFAULT_SCHEMA_DIR,
            help="schema folder (default: the schemas shipped with agentlog)",
        )
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "list":
            sub.add_argument(
                "--all",
                action="store_true",
                help="every subject the registry holds, not only this deployment's",
            )
        sub.set_defaults(func=func)
